"""Clopper–Pearson empirical ε lower bounds (DESIGN §6).

For an (ε, δ)-DP mechanism every test satisfies FPR + e^ε FNR ≥ 1 − δ and FNR + e^ε FPR ≥ 1 − δ
(Kairouz et al. 2015, Thm 2.1). With one-sided upper confidence bounds on FPR and FNR, each at
level α/2, ε_LB = max(0, log((1−δ−FNR_ub)/FPR_ub), log((1−δ−FPR_ub)/FNR_ub)) holds with
confidence 1 − α.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

from ..errors import require


def clopper_pearson_upper(errors: np.ndarray | int, total: np.ndarray | int, alpha: float) -> np.ndarray:
    """One-sided (1 − α) upper Clopper–Pearson bound on a binomial rate: Beta(1−α; x+1, n−x)."""
    errors, total = np.asarray(errors, dtype=float), np.asarray(total, dtype=float)
    with np.errstate(invalid="ignore"):
        upper = beta.ppf(1 - alpha, errors + 1, total - errors)
    return np.where(errors >= total, 1.0, upper)


def _log_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(numerator > 0, np.log(numerator) - np.log(denominator), 0.0)


@dataclass(frozen=True)
class Bound:
    epsilon_lower_bound: float
    fpr_upper: float
    fnr_upper: float


def epsilon_bounds(fp: np.ndarray, fn: np.ndarray, negatives: int, positives: int, delta: float,
                   confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised ε_LB over many (FP, FN) pairs; returns (ε_LB, FPR_ub, FNR_ub)."""
    alpha = 1 - confidence
    fpr_ub = clopper_pearson_upper(fp, negatives, alpha / 2)
    fnr_ub = clopper_pearson_upper(fn, positives, alpha / 2)
    eps = np.maximum(0.0, np.maximum(_log_ratio(1 - delta - fnr_ub, fpr_ub), _log_ratio(1 - delta - fpr_ub, fnr_ub)))
    return eps, fpr_ub, fnr_ub


def epsilon_lower_bound(fp: int, fn: int, negatives: int, positives: int, delta: float,
                        confidence: float = 0.95) -> Bound:
    """ε_LB from the counts of one test on EVAL (FP among canary-out, FN among canary-in)."""
    require(negatives >= 1 and positives >= 1, "need at least one negative and one positive trial")
    require(0 <= fp <= negatives, f"false positives ({fp}) must lie in [0, negatives = {negatives}]")
    require(0 <= fn <= positives, f"false negatives ({fn}) must lie in [0, positives = {positives}]")
    require(0 < delta < 1, f"delta must be in (0, 1), got {delta}")
    require(0 < confidence < 1, f"confidence must be in (0, 1), got {confidence}")
    eps, fpr_ub, fnr_ub = epsilon_bounds(np.array(fp), np.array(fn), negatives, positives, delta, confidence)
    return Bound(float(eps), float(fpr_ub), float(fnr_ub))
