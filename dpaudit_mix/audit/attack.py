"""The membership attack: a threshold on a score, chosen on SELECT, counted on EVAL.

Scores are larger when the canary is more likely in. Choosing the threshold on a disjoint
SELECT half keeps the EVAL counts binomial, so the Clopper–Pearson bound stays valid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bounds import Bound, epsilon_bounds, epsilon_lower_bound


@dataclass(frozen=True)
class AttackResult:
    threshold: float
    select_bound: float
    bound: Bound
    fp: int
    fn: int
    negatives: int
    positives: int


def _counts(scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FP = #out with score ≥ τ, FN = #in with score < τ, for every τ."""
    fp = len(scores_out) - np.searchsorted(np.sort(scores_out), thresholds, side="left")
    fn = np.searchsorted(np.sort(scores_in), thresholds, side="left")
    return fp, fn


def choose_threshold(scores_in: np.ndarray, scores_out: np.ndarray, delta: float, confidence: float) -> tuple[float, float]:
    """The τ among the SELECT scores that maximises the CP bound there; (τ, its ε_LB)."""
    candidates = np.unique(np.concatenate([scores_in, scores_out, [np.inf]]))
    fp, fn = _counts(scores_in, scores_out, candidates)
    eps, _, _ = epsilon_bounds(fp, fn, len(scores_out), len(scores_in), delta, confidence)
    best = int(np.argmax(eps))
    return float(candidates[best]), float(eps[best])


def audit_scores(scores: np.ndarray, include: np.ndarray, select: np.ndarray, delta: float,
                 confidence: float = 0.95) -> AttackResult:
    """Threshold on the runs in SELECT, ε_LB on the others (EVAL)."""
    sel_in, sel_out = scores[select & include], scores[select & ~include]
    threshold, select_bound = choose_threshold(sel_in, sel_out, delta, confidence)
    ev_in, ev_out = scores[~select & include], scores[~select & ~include]
    fp, fn = _counts(ev_in, ev_out, np.array([threshold]))
    bound = epsilon_lower_bound(int(fp[0]), int(fn[0]), len(ev_out), len(ev_in), delta, confidence)
    return AttackResult(threshold, select_bound, bound, int(fp[0]), int(fn[0]), len(ev_out), len(ev_in))
