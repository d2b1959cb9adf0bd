"""``check_mechanism``: a user's release function on two neighbouring datasets, many runs each,
audited with the sound bounds of :mod:`..audit.scores`.

The scores are the releases themselves (or ``score(release)`` for a non-scalar output). A leak
may push the neighbour's releases up or down, so both directions are audited, each at half the
level: ``epsilon_violation`` in either (the strict (ε, δ) bound of Kairouz et al., Thm 2.1, with
Clopper–Pearson intervals and Bonferroni over thresholds), or with ``phases`` a point below the
claimed mechanism's trade-off curve, fails the check.

Every report states its power (``details["detects"]``, :mod:`..audit.power`): the smallest σ/c
of the claimed mechanism that ``runs`` runs a side flag in ≥ 90 % of audits with 95 %
confidence, so a pass says what it could have caught. ``detect = c`` sizes the check to reach it
instead: the fewest runs on :data:`RUNS_LADDER` (at least ``runs``) whose power catches σ/c.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import accounting
from ..audit.claim import Claim, claim_of
from ..audit.many_run.scores import audit_scores
from ..audit.plan import catches, check_detect, power_at
from ..audit.power import Power
from ..base.errors import InputError, is_real, require
from .failure import Case, Report

#: runs a side a ``detect`` may size the check to (a release function is cheap to call: the
#: ladder runs past an audit's trainings).
RUNS_LADDER = (2000, 5000, 10_000, 20_000, 50_000, 100_000)


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
    claim: Claim | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    runs: int = 2000,
    score: Callable[[Any], Any] | None = None,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    confidence: float = 0.95,
    curve: str | None = None,
    detect: float | None = None,
) -> Report:
    """Run ``release_fn`` ``runs`` times on each of (D, D′) and audit the claim on both
    directions (D′ releasing larger, and smaller), each at half the level.

    Args:
      release_fn: the mechanism, called on one data set at a time; it draws its own noise (a
        CSPRNG in production).
      neighbours: (D, D′), two neighbouring data sets.
      claim: the claim checked (:class:`~dpaudit_mix.audit.claim.Claim`); or the keywords below.
      epsilon: the claimed ε (with ``delta``, ``phases``, ``curve``: a Claim).
      delta: the claimed δ.
      runs: releases a side, at least 10.
      score: maps a release to a real score (default: the release itself).
      phases: the Gaussian phases the mechanism runs (their curve is tested too).
      confidence: the level of the check, shared by its two directions.
      curve: ``"gdp"`` to state a μ-GDP mechanism.
      detect: c, to size the check to catch σ/c: the fewest runs on :data:`RUNS_LADDER`, at
        least ``runs`` (ValueError where none does).

    Returns:
      The :class:`~.failure.Report` of a passed check; ``details["detects"]`` is the leak it
      catches at its size (σ/c flagged in ≥ 90 % of audits, 95 % confidence; None: no leak up to
      σ/10, or no power simulated), ``details["runs"]`` the runs a side.

    Raises:
      CheckFailed: a direction's lower bound is above ε, or a release failed.
      InputError: a bad argument or claim.
    """
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
    claim = claim_of(claim, epsilon=epsilon, delta=delta, phases=phases, curve=curve)
    half = 1 - (1 - confidence) / 2  # two directions share the level
    runs, power = _sized(claim, runs, half, detect)
    out_scores, fault = _releases(release_fn, neighbours[0], runs, score, "first")
    in_scores, fault_in = (
        (None, "") if out_scores is None else _releases(release_fn, neighbours[1], runs, score, "second")
    )
    details: dict[str, Any] = {"runs": runs, "detects": None if power is None else power.detects}
    if out_scores is None or in_scores is None:
        return Report("check_mechanism", (Case("releases", False, fault or fault_in),), details).raise_on_failure()
    cases: list[Case] = []
    for direction, sign in (("D′ releases larger", 1.0), ("D′ releases smaller", -1.0)):
        result = audit_scores(
            sign * in_scores,
            sign * out_scores,
            claim=claim,
            confidence=half,
        )
        why = (
            f"ε_LB {result.epsilon_lower_bound:.3f} against the claimed ε {claim.epsilon:g} over {2 * runs} runs "
            f"(AUROC {result.auroc:.3f})"
        )
        if result.profile_violation:
            why += "; a point lies BELOW the claimed mechanism's trade-off curve"
        cases.append(Case(direction, not result.violation, f"{why}; {_caught(power, runs)}"))
        details[direction] = result.epsilon_lower_bound
    return Report("check_mechanism", tuple(cases), details).raise_on_failure()


def _caught(power: Power | None, runs: int) -> str:
    """What a pass at this size is evidence of, in words."""
    if power is None:
        return f"at {runs} runs a side no power is simulated for this claim"
    if power.detects is None:
        return f"at {runs} runs a side this check catches no leak up to σ/10: a pass is no evidence"
    return (
        f"at {runs} runs a side it catches σ/{power.detects:g} with 90% (95% confidence); "
        "a smaller leak can pass (detect= sizes the check)"
    )


def _sized(claim: Claim, runs: int, confidence: float, detect: float | None) -> tuple[int, Power | None]:
    """The runs a side (``runs``, or the fewest on :data:`RUNS_LADDER` at least as many that catch
    σ/``detect``) and their power (:func:`..audit.plan.power_at`, each direction at ``confidence``)."""

    def power(size: int) -> Power | None:
        return power_at(claim, size, one_run=False, confidence=confidence)

    if detect is None:
        return runs, power(runs)
    detect = check_detect(detect)
    found: Power | None = None
    for size in sorted({runs, *(r for r in RUNS_LADDER if r > runs)}):
        found = power(size)
        if catches(found, detect):
            return size, found
    caught = "nothing" if found is None or found.detects is None else f"σ/{found.detects:g}"
    raise InputError(
        f"no check up to {max(runs, RUNS_LADDER[-1]):,} runs a side catches σ/{detect:g} for this claim (the largest "
        f"catches {caught}): raise detect, or state the mechanism's phases"
    )
