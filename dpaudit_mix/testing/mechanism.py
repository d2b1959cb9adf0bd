"""``check_mechanism``: a user's release function on two neighbouring datasets, many runs each,
audited with the sound bounds of :mod:`..audit.scores`.

The scores are the releases themselves (or ``score(release)`` for a non-scalar output). A leak
may push the neighbour's releases up or down, so both directions are audited, each at half the
level: ``epsilon_violation`` in either (the strict (ε, δ) bound of Kairouz et al., Thm 2.1, with
Clopper–Pearson intervals and Bonferroni over thresholds), or with ``phases`` a point below the
claimed mechanism's trade-off curve, fails the check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import accounting
from ..audit.scores import audit_scores
from ..errors import is_real, require
from .failure import Case, Report


def _releases(release_fn: Callable[[Any], Any], data: Any, runs: int, score: Callable[[Any], Any] | None, which: str):
    values = []
    for run in range(runs):
        try:
            out = release_fn(data)
            value = out if score is None else score(out)
        except Exception as exc:  # the user's code
            return None, f"on the {which} dataset, run {run + 1}: {type(exc).__name__}: {exc}"
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value.item()
        if not is_real(value) or not np.isfinite(value):
            what = "score" if score is not None else "release_fn"
            hint = "" if score is not None else " (give score= to map a non-scalar release to one number)"
            return None, f"on the {which} dataset, run {run + 1}: {what} returned {value!r}, not a finite number{hint}"
        values.append(float(value))
    return np.asarray(values), ""


def check_mechanism(
    release_fn: Callable[[Any], Any],
    neighbours: tuple[Any, Any],
    *,
    epsilon: float,
    delta: float,
    runs: int = 2000,
    score: Callable[[Any], Any] | None = None,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    confidence: float = 0.95,
    curve: str | None = None,
) -> Report:
    """Run ``release_fn`` ``runs`` times on each of ``neighbours`` = (D, D′) and audit the claim
    (ε, δ) (and, with ``phases``, the claimed Gaussian mechanism's curve; with ``curve="gdp"``,
    the μ-GDP curve of ε the caller states the mechanism has); returns the
    :class:`~.failure.Report` or raises :class:`~.failure.CheckFailed`. ``release_fn`` draws its
    own noise (its mechanism's randomness, a CSPRNG in production)."""
    require(callable(release_fn), f"release_fn must be callable, got {type(release_fn).__name__}")
    require(score is None or callable(score), f"score must be callable, got {type(score).__name__}")
    require(
        isinstance(neighbours, tuple) and len(neighbours) == 2,
        f"neighbours must be a pair (D, D'), got {type(neighbours).__name__}",
    )
    require(
        isinstance(runs, int) and not isinstance(runs, bool) and runs >= 10,
        f"runs must be an integer >= 10, got {runs!r}",
    )
    require(is_real(confidence) and 0.5 < confidence < 1, f"confidence must be in (0.5, 1), got {confidence!r}")
    accounting.check_epsilon(epsilon)
    accounting.check_delta(delta)
    out_scores, fault = _releases(release_fn, neighbours[0], runs, score, "first")
    in_scores, fault_in = (
        (None, "") if out_scores is None else _releases(release_fn, neighbours[1], runs, score, "second")
    )
    if out_scores is None or in_scores is None:
        return Report("check_mechanism", (Case("releases", False, fault or fault_in),), {}).raise_on_failure()
    cases, details = [], {}
    half = 1 - (1 - confidence) / 2  # two directions share the level
    for direction, sign in (("D′ releases larger", 1.0), ("D′ releases smaller", -1.0)):
        result = audit_scores(
            sign * in_scores,
            sign * out_scores,
            epsilon=epsilon,
            delta=delta,
            phases=phases,
            confidence=half,
            curve=curve,
        )
        why = (
            f"ε_LB {result.epsilon_lower_bound:.3f} against the claimed ε {epsilon:g} over {2 * runs} runs "
            f"(AUROC {result.auroc:.3f})"
        )
        if result.profile_violation:
            why += "; a point lies BELOW the claimed mechanism's trade-off curve"
        cases.append(Case(direction, not result.violation, why))
        details[direction] = result.epsilon_lower_bound
    return Report("check_mechanism", tuple(cases), details).raise_on_failure()
