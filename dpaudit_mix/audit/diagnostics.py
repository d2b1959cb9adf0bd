"""Attack diagnostics that carry no DP claim but tell an auditor how strong the attack is:
AUROC with a stratified bootstrap interval, and TPR at small fixed FPRs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..randomness import Stream

#: FPR levels at which the TPR is reported.
FPR_LEVELS = (1e-3, 1e-2)
BOOTSTRAP_RESAMPLES = 400


@dataclass(frozen=True)
class Diagnostics:
    auroc: float
    auroc_ci: tuple[float, float]
    tpr_at_fpr: dict[str, float]


def _auroc(count_in: np.ndarray, count_out: np.ndarray) -> float:
    """P(in > out) + ½ P(in = out) from the counts of each distinct score value (sorted)."""
    below = np.cumsum(count_out) - count_out
    return float(count_in @ (below + 0.5 * count_out) / (count_in.sum() * count_out.sum()))


def tpr_at_fpr(scores_in: np.ndarray, scores_out: np.ndarray, level: float) -> float:
    """The largest empirical TPR of a threshold test whose empirical FPR is at most ``level``."""
    allowed = int(np.floor(level * len(scores_out)))
    if allowed >= len(scores_out):
        return 1.0
    cut = np.sort(scores_out)[::-1][allowed]  # a threshold just above it lets ≤ `allowed` outs pass
    return float(np.mean(scores_in > cut))


def diagnose(
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    bootstrap: Stream,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
) -> Diagnostics:
    """AUROC (percentile bootstrap, in- and out-runs resampled separately) and TPR at FPR_LEVELS."""
    values, ranks = np.unique(np.concatenate([scores_in, scores_out]), return_inverse=True)
    ranks_in, ranks_out = ranks[: len(scores_in)], ranks[len(scores_in) :]
    levels = len(values)

    def auroc(r_in: np.ndarray, r_out: np.ndarray) -> float:
        return _auroc(np.bincount(r_in, minlength=levels), np.bincount(r_out, minlength=levels))

    # Scores become the index of their distinct value, so a resample costs two bincounts.
    rng = bootstrap.numpy()
    boot = [
        auroc(
            ranks_in[rng.integers(len(ranks_in), size=len(ranks_in))],
            ranks_out[rng.integers(len(ranks_out), size=len(ranks_out))],
        )
        for _ in range(resamples)
    ]
    tail = (1 - confidence) / 2
    low, high = np.quantile(boot, [tail, 1 - tail])
    return Diagnostics(
        auroc(ranks_in, ranks_out),
        (float(low), float(high)),
        {f"{level:g}": tpr_at_fpr(scores_in, scores_out, level) for level in FPR_LEVELS},
    )
