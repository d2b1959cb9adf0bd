"""Attack diagnostics that carry no DP claim but tell an auditor how strong the attack is:
AUROC with DeLong's interval, and TPR at small fixed FPRs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: FPR levels at which the TPR is reported.
FPR_LEVELS = (1e-3, 1e-2)


@dataclass(frozen=True)
class Diagnostics:
    auroc: float
    auroc_ci: tuple[float, float]
    tpr_at_fpr: dict[str, float]


def tpr_at_fpr(scores_in: np.ndarray, scores_out: np.ndarray, level: float) -> float:
    """The largest empirical TPR of a threshold test whose empirical FPR is at most ``level``."""
    allowed = int(np.floor(level * len(scores_out)))
    if allowed >= len(scores_out):
        return 1.0
    cut = np.sort(scores_out)[::-1][allowed]  # a threshold just above it lets ≤ `allowed` outs pass
    return float(np.mean(scores_in > cut))


def auroc_interval(scores_in: np.ndarray, scores_out: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """AUROC and its two-sided normal interval at ``confidence`` by DeLong's variance (DeLong,
    DeLong & Clarke-Pearson 1988, Biometrics 44: the structural components V10 and V01, ties
    counted ½): var = s²(V10)/m + s²(V01)/n. Two sorts and two searches, so 10⁷ scores per class
    take seconds where a bootstrap takes hours; clipped to [0, 1]. Asymptotic: near AUROC 1 with
    few runs it is narrower than it should be (it is a diagnostic, never a privacy claim)."""
    from scipy.special import ndtri

    sorted_in, sorted_out = np.sort(scores_in), np.sort(scores_out)

    def placements(queries: np.ndarray, sorted_other: np.ndarray) -> np.ndarray:
        """Each query's share of ``sorted_other`` below it, ties ½ (sorted queries: the searches
        walk memory in order, 20× faster than scattered ones at 10⁷)."""
        left = np.searchsorted(sorted_other, queries, "left")
        return (left + 0.5 * (np.searchsorted(sorted_other, queries, "right") - left)) / len(sorted_other)

    v10 = placements(sorted_in, sorted_out)  # per in-score: P(out < it) + ½ P(out = it)
    v01 = 1 - placements(sorted_out, sorted_in)  # per out-score: P(in > it) + ½ P(in = it)
    auc = float(v10.mean())
    variance = (
        v10.var(ddof=1) / len(scores_in) + v01.var(ddof=1) / len(scores_out) if min(len(v10), len(v01)) > 1 else np.inf
    )
    half = float(ndtri(1 - (1 - confidence) / 2) * np.sqrt(variance))
    return auc, max(0.0, auc - half), min(1.0, auc + half)


def diagnose(scores_in: np.ndarray, scores_out: np.ndarray, confidence: float = 0.95) -> Diagnostics:
    """AUROC with DeLong's interval (:func:`auroc_interval`) and TPR at FPR_LEVELS."""
    auc, low, high = auroc_interval(scores_in, scores_out, confidence)
    return Diagnostics(
        auc,
        (low, high),
        {f"{level:g}": tpr_at_fpr(scores_in, scores_out, level) for level in FPR_LEVELS},
    )
