"""The membership attack: threshold tests on a score, and how their thresholds are chosen (a
registered strategy, :data:`THRESHOLDS`; the built-ins below register themselves).

Scores are larger when the canary is more likely in. Candidate thresholds sit just above the
canary-out scores at a fixed grid of ranks (:func:`rank_grid`: geometric from both ends, so the tails that
the strict bound needs and the middle that μ_LB needs are both there). For the Clopper–Pearson
bounds to hold, the counts must stay binomial:

- ``bonferroni`` (default): the thresholds depend on the out-scores alone, so given them the
  in-runs' FN counts are binomial; the FPR of "score > the j-th largest of N out-scores" is
  Beta(j, N−j+1)-distributed (stochastically smaller with ties), which is exactly the CP upper
  posterior for j − 1 errors. So every one of the m candidates' CP bounds, at α/m each, holds at
  once with confidence 1 − α, on all runs.
- ``split``: choose the best candidate on a SELECT half of the runs, count it on the disjoint
  EVAL half (one threshold for the strict ε_LB, one for μ_LB and the profile verdict, each at
  α/2, so that the verdict, which rests on both, keeps the level α).

Measured on exact Gaussian scores at ε = 1 (μ = 0.268), 20,000 runs, 100 trials (`python
bench/tightness.py`, part 0): μ_LB/μ = 0.74 ± 0.07 for bonferroni against 0.58 ± 0.32 for split
(its two EVAL counts at α/2 each; the split's winner on SELECT is often a lucky tail threshold
that EVAL does not confirm), and a
1.5× leak is flagged in 100% against 81% of trials. Bonferroni over the empirical ROC convex hull
instead gave 0.77 ± 0.06, but its candidates are picked with the labels, so its coverage would
rest on simulation alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..accounting import gdp_epsilon_of_mu
from ..base.errors import require
from ..base.registry import Registry
from .bounds import cp_upper, gdp_mu, strict_epsilon
from .profile import TradeOff

#: candidate ranks from each end of the out-scores (about twice this many candidates in all).
RANKS_PER_SIDE = 12


@dataclass(frozen=True)
class CPPoint:
    """A threshold test counted on its evaluation runs, with its CP upper bounds."""

    threshold: float
    fp: int
    fn: int
    negatives: int
    positives: int
    fpr_upper: float
    fnr_upper: float


@dataclass(frozen=True)
class AttackResult:
    """The strict and the GDP bound, each at its own threshold; ``points`` are every test whose
    CP bounds hold together at the confidence (the profile verdict is checked on each)."""

    strategy: str
    strict: CPPoint
    gdp: CPPoint
    epsilon_lower_bound: float
    mu_lower_bound: float
    epsilon_lower_bound_gdp: float
    points: tuple[CPPoint, ...]
    candidates: int  # the number of thresholds α was shared over (1 for split)
    evaluated: np.ndarray  # the runs the bounds were counted on (bool per run): all, or EVAL for split
    point_confidence: float  # the confidence of each CP point (α shared over the candidates)

    def perfect_point(self) -> tuple[float, float]:
        """The CP point of a test with no error at all on the counted runs: the best any threshold
        attack could show from this many runs (the audit's power)."""
        fpr, fnr = cp_upper(
            np.array(0), np.array(0), self.strict.negatives, self.strict.positives, self.point_confidence
        )
        return float(fpr), float(fnr)

    def profile_violation(self, claimed: TradeOff) -> bool:
        fpr = np.array([p.fpr_upper for p in self.points])
        fnr = np.array([p.fnr_upper for p in self.points])
        return bool(np.any(claimed.violated(fpr, fnr)))


def rank_grid(n: int, per_side: int) -> np.ndarray:
    """Ranks 1..n (1 = largest), geometric from the top and from the bottom, fixed before any
    score is seen."""
    half = np.unique(np.round(np.geomspace(1, max(1, n // 2), per_side)).astype(int))
    return np.unique(np.concatenate([half, n + 1 - half]))


def candidates(sorted_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The out-scores (sorted ascending) at the fixed rank grid, largest first, and each one's
    rank j (1 = largest): "score > the j-th largest" allows j − 1 false positives (ties can only
    make the real count smaller)."""
    ranks = rank_grid(len(sorted_out), RANKS_PER_SIDE)
    return sorted_out[len(sorted_out) - ranks], ranks


def _candidates(scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Thresholds just above the out-scores at the fixed rank grid, and the FP count each allows."""
    values, ranks = candidates(np.sort(scores_out))
    return np.nextafter(values, np.inf), ranks - 1


def _counts(scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FP = #out with score ≥ τ, FN = #in with score < τ, for every τ."""
    fp = len(scores_out) - np.searchsorted(np.sort(scores_out), thresholds, side="left")
    fn = np.searchsorted(np.sort(scores_in), thresholds, side="left")
    return fp, fn


def _points(
    scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray, confidence: float
) -> tuple[CPPoint, ...]:
    """CP points of the tests "score ≥ τ", counted on the scores."""
    fp, fn = _counts(scores_in, scores_out, thresholds)
    fpr_ub, fnr_ub = cp_upper(fp, fn, len(scores_out), len(scores_in), confidence)
    return tuple(
        CPPoint(float(t), int(a), int(b), len(scores_out), len(scores_in), float(u), float(v))
        for t, a, b, u, v in zip(thresholds, fp, fn, fpr_ub, fnr_ub, strict=True)
    )


def _strict(point: CPPoint, delta: float) -> float:
    return float(strict_epsilon(point.fpr_upper, point.fnr_upper, delta))


def _mu(point: CPPoint) -> float:
    return float(gdp_mu(point.fpr_upper, point.fnr_upper))


@dataclass(frozen=True)
class Thresholds:
    """What a threshold strategy chose: the test behind the strict bound and the one behind μ_LB,
    every test whose CP bounds hold together (``points``), how many candidates α was shared
    over, the runs they were counted on, and each point's confidence."""

    strict: CPPoint
    gdp: CPPoint
    points: tuple[CPPoint, ...]
    candidates: int
    evaluated: np.ndarray
    point_confidence: float


class Strategy(Protocol):
    """How thresholds are chosen. Its CP points must hold together at ``confidence``: the choice
    may depend on the labels only of runs it does not count (``select`` marks a split's SELECT)."""

    def __call__(
        self, scores: np.ndarray, include: np.ndarray, select: np.ndarray, delta: float, confidence: float
    ) -> Thresholds: ...


def bonferroni(
    scores: np.ndarray, include: np.ndarray, select: np.ndarray, delta: float, confidence: float
) -> Thresholds:
    """Every candidate counted on all runs, at α/m each (the module's first rule)."""
    s_in = np.sort(scores[include])
    thresholds, fp = _candidates(scores[~include])
    fn = np.searchsorted(s_in, thresholds, side="left")
    return bonferroni_tests(thresholds, fp, fn, int(np.sum(~include)), len(s_in), delta=delta, confidence=confidence)


def bonferroni_tests(
    thresholds: np.ndarray,
    fp: np.ndarray,
    fn: np.ndarray,
    negatives: int,
    positives: int,
    *,
    delta: float,
    confidence: float,
) -> Thresholds:
    """The bonferroni rule on its candidates' counts, however they were counted (on the runs, on
    sorted scores, or drawn from the counts' own law by :mod:`.power`): CP at α/m each, all runs."""
    level = 1 - (1 - confidence) / len(thresholds)
    fpr_ub, fnr_ub = cp_upper(fp, fn, negatives, positives, level)
    points = tuple(
        CPPoint(float(t), int(a), int(b), negatives, positives, float(u), float(v))
        for t, a, b, u, v in zip(thresholds, fp, fn, fpr_ub, fnr_ub, strict=True)
    )
    strict = max(points, key=lambda p: _strict(p, delta))
    every = np.broadcast_to(np.True_, (negatives + positives,))  # no copy: 10⁸ runs cost nothing
    return Thresholds(strict, max(points, key=_mu), points, len(thresholds), every, level)


def split(scores: np.ndarray, include: np.ndarray, select: np.ndarray, delta: float, confidence: float) -> Thresholds:
    """The best candidates on SELECT, each counted once on EVAL (the module's second rule)."""
    sel_in, sel_out = scores[select & include], scores[select & ~include]
    chosen = _points(sel_in, sel_out, _candidates(sel_out)[0], confidence)
    best_strict = max(chosen, key=lambda p: _strict(p, delta))
    best_gdp = max(chosen, key=_mu)
    # Two thresholds counted on EVAL, each verdict resting on one: α/2 each keeps the level α.
    level = 1 - (1 - confidence) / 2
    strict, gdp = _points(
        scores[~select & include],
        scores[~select & ~include],
        np.array([best_strict.threshold, best_gdp.threshold]),
        level,
    )
    return Thresholds(strict, gdp, (gdp,), 1, ~select, level)


def _check_strategy(name: str, obj: Any) -> None:
    require(callable(obj), f"threshold strategy {name!r} must be callable (scores, include, select, delta, confidence)")


#: every threshold strategy an audit may name (``threshold = ...``).
THRESHOLDS: Registry[Strategy] = Registry("threshold strategy", "thresholds", _check_strategy)


def register_threshold_strategy(name: str, strategy: Strategy, *, replace: bool = False) -> Strategy:
    """Make ``strategy`` an audit's ``threshold = "name"``.

    Args:
      name: the name an audit's ``threshold`` gives.
      strategy: a ``Strategy``; it must keep the Clopper–Pearson level, since every bound an
        audit reports rests on it.
      replace: whether it may replace a strategy already registered under ``name``.

    Returns:
      ``strategy``.

    Raises:
      InputError: a bad name or a name taken (without ``replace``)."""
    return THRESHOLDS.register(name, strategy, replace=replace)


#: the strategies this package registers (its tests and benchmarks run each).
BUILTIN_STRATEGIES = ("bonferroni", "split")
register_threshold_strategy("bonferroni", bonferroni)
register_threshold_strategy("split", split)


def attack(
    scores: np.ndarray,
    include: np.ndarray,
    select: np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    strategy: str = "bonferroni",
) -> AttackResult:
    """The strict and GDP bounds of the best threshold tests on ``scores`` under ``strategy``."""
    chosen = THRESHOLDS.get(strategy)(scores, include, select, delta, confidence)
    require(isinstance(chosen, Thresholds), f"threshold strategy {strategy!r} returned no Thresholds")
    return attack_result(strategy, chosen, delta)


def attack_result(strategy: str, chosen: Thresholds, delta: float) -> AttackResult:
    """The strict and GDP bounds of what ``strategy`` chose."""
    mu = _mu(chosen.gdp)
    return AttackResult(
        strategy,
        chosen.strict,
        chosen.gdp,
        _strict(chosen.strict, delta),
        mu,
        gdp_epsilon_of_mu(mu, delta),
        chosen.points,
        chosen.candidates,
        chosen.evaluated,
        chosen.point_confidence,
    )
