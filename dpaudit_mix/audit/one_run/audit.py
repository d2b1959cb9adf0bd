"""One-run audits: m canaries, each in the training set independently with probability ½, one
training run, one score per canary (larger = "more likely in").

The guesses (:mod:`.guesses`: symmetric sets, and one-sided ones where the claim is subsampled)
are tested by two methods, each a bound on P[V ≥ v] for a mechanism that meets a curve:

- **Steinke**, Nasr & Jagielski 2023 (:func:`.guesses.p_value`), for an (ε, δ) point;
- **f-DP**, Mahloujifar, Melis & Chaudhuri 2025 (:mod:`.fdp`), for a whole trade-off curve.

Both bound the same probability, so the smaller of the two is a valid p-value, and a set that
either method rejects rejects the curve at the set's level: no level is split between them.

**ε_LB** (``epsilon_lower_bound``) is the largest ε′ whose (ε′, δ) curve some set rejects, by
either method (``bounds`` gives each method's own); it holds for any mechanism. **The claimed
curve** (with phases): the μ-GDP curve μ = √(ΣT/σ²) of full-batch phases (Dong, Roth & Su 2019,
Cor. 3.3), or the PLD privacy profile of subsampled ones, tested by f-DP (and, for a profile, by
Steinke's test at each of its points, as a curve implies every point of its profile);
``epsilon_lower_bound_profile`` is the largest ε of the claimed phases with σ scaled by one
factor c whose curve is still rejected (a bound on the ε of that family only).

**One level.** For one guess set, each rejected curve is an upper tail {V ≥ v★} of the same
count V, and a curve the mechanism meets has P[V ≥ v★] ≤ the set's level; so rejecting *any*
curve the claim implies — (ε′, δ) for ε′ > ε, or the claimed curve — is one event of at most
that probability under the claim. The verdict (``violation``: ε_LB > ε, or the claimed curve
rejected) holds at the audit's level, Bonferroni over the guess sets alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ... import accounting
from ...base.errors import is_real, require
from ...base.randomness import secure_root
from ..accounted import Accounted
from ..claim import Claim, claim_of
from ..power import caught
from ..profile import BISECTION_INTERVAL, BISECTION_MIN_SIGMA, BISECTION_RATIO, scale_threshold
from .estimate import Estimate, gaussian_pair
from .fdp import PROFILE_FLOOR, PROFILE_GRID, Curves, GaussianCurves, LineCurves, rejects
from .guesses import EPSILON_MAX, MIN_CANARIES, GuessSets, largest_rejected, p_values, tie_break, tied
from .power import OneRunPowerClaim, Power, one_run_power, one_run_power_claim, one_run_unsimulated

__all__ = ["MIN_CANARIES", "OneRunResult", "audit_one_run", "checked_canaries", "subsampled"]

#: what a one-run audit does, in order (``audit_one_run``'s ``step`` hears each as it starts).
STEPS = ("bounds of every guess set", "the claimed curve", "the profile bound")
#: the f-DP searches: a geometric grid of this many candidates over [GRID_LOW, EPSILON_MAX]
#: (ε′, or μ), then as many again between the largest rejected one and the next.
GRID_POINTS, GRID_LOW = 48, 1e-3


@dataclass(frozen=True)
class Profile:
    """A privacy profile as (ε′, δ(ε′)) points: a claimed curve, tested by both methods."""

    epsilons: tuple[float, ...]
    deltas: tuple[float, ...]

    @classmethod
    def of(cls, phases: Sequence[accounting.GaussianPhase], interval: float | None = None) -> Profile:
        grid, deltas = accounting.privacy_profile_curve(phases, PROFILE_FLOOR, PROFILE_GRID, interval)
        return cls(tuple(float(e) for e in grid), tuple(float(d) for d in deltas))

    def p_value(self, canaries: int, guesses: int, correct: int) -> float:
        """Steinke's bound at every point of the profile: the smallest holds (its minimum is taken
        before anything random)."""
        return float(p_values(canaries, guesses, correct, np.array(self.epsilons), np.array(self.deltas)).min())

    def rejects(self, sets: GuessSets, alpha: float) -> bool:
        if any(self.p_value(sets.canaries, r, v) <= alpha for r, v in sets.pairs()):
            return True
        curve = LineCurves(np.array([self.epsilons]), np.array([self.deltas]))
        return bool(rejects(curve, sets.canaries, sets.guesses, sets.correct, alpha).any())


def largest_rejected_curve(curves_of: Callable[[np.ndarray], Curves], sets: GuessSets, alpha: float) -> np.ndarray:
    """Each set's largest parameter on the search grid whose curve it rejects by f-DP (0 where
    none): a coarse geometric grid, then a fine one above the best."""
    grid = np.geomspace(GRID_LOW, EPSILON_MAX, GRID_POINTS)

    def best(candidates: np.ndarray) -> np.ndarray:
        found = rejects(curves_of(candidates), sets.canaries, sets.guesses, sets.correct, alpha)
        return np.where(found.any(axis=1), np.where(found, candidates, 0.0).max(axis=1), 0.0)

    coarse = best(grid)
    top = float(coarse.max())
    if top == 0.0 or top >= EPSILON_MAX:
        return coarse
    above = grid[np.searchsorted(grid, top) + 1]
    return np.maximum(coarse, best(np.linspace(top, above, GRID_POINTS)[1:-1]))


@dataclass(frozen=True)
class OneRunResult:
    """A one-run audit's result (audit.json's fields, as the file reference describes them).

    Attributes:
      canaries: m, the canaries scored.
      guesses: r, the guesses of the guess set behind ε_LB.
      correct: v, how many of them were right.
      epsilon_lower_bound: ε_LB, the larger of Steinke et al.'s and the f-DP line's bounds.
      epsilon_violation: ε_LB above the claimed ε.
      profile_violation: the claimed curve rejected (None without phases).
      epsilon_lower_bound_profile: the profile bound (None without phases).
      tie_break: the stream that ranked tied scores (its seed, where it came from, its label)."""

    canaries: int
    members: int
    guesses: int
    correct: int
    one_sided: bool
    epsilon: float
    delta: float
    confidence: float
    epsilon_lower_bound: float  # the best rigorous bound: the max over ``bounds``
    bounds: dict[str, float]  # each method's own ε_LB: {"steinke": …, "fdp": …}
    epsilon_violation: bool
    epsilon_lower_bound_profile: float | None
    profile_violation: bool | None
    guess_sets: int
    one_sided_sets: bool  # the grid has one-sided sets too (the claim is subsampled)
    level_per_test: float
    epsilon_estimate: Estimate  # an estimate, never a verdict: see :mod:`.estimate`
    #: the u that ranked tied scores (:func:`.guesses.tie_break`): its stream, seed and label, and
    #: how many canaries tied (0: the order of the scores alone decided every guess)
    tie_break: dict[str, Any]
    power_claim: OneRunPowerClaim | None = field(default=None, repr=False, compare=False)
    #: the accountant behind the claimed ε and its figure for the phases (Opacus' beside it where
    #: the engine is Opacus: :meth:`.gradient_canaries.Canaries.audit`)
    accounted: Accounted | None = field(default=None, compare=False)
    #: why no power is reported (:func:`.one_run_power.one_run_unsimulated`; None where it is)
    power_unsimulated: str | None = field(default=None, compare=False)

    @property
    def violation(self) -> bool:
        return self.epsilon_violation or bool(self.profile_violation)

    def verdict_line(self) -> str:
        """The verdict in one line: the test that fired, ε_LB by each method against the claim,
        the guesses behind it, and the claimed profile's test."""
        verdict = (
            "VIOLATION (ε violated)"
            if self.epsilon_violation
            else "VIOLATION (curve violated: the mechanism is not the claimed one; the (ε, δ) claim itself is not "
            "shown violated)"
            if self.violation
            else "no violation"
        )
        profile = (
            ""
            if self.profile_violation is None
            else f"; the claimed profile {'REJECTED' if self.profile_violation else 'not rejected'}"
            + (
                ""
                if self.epsilon_lower_bound_profile is None
                else f" (ε_LB profile {self.epsilon_lower_bound_profile:.3f})"
            )
        )
        methods = ", ".join(f"{name} {value:.3f}" for name, value in self.bounds.items())
        return (
            f"{verdict}: ε_LB = {self.epsilon_lower_bound:.3f} ({methods}) against the claimed ε = {self.epsilon:g} "
            f"(δ = {self.delta:g}; {self.correct} of {self.guesses} guesses right){profile}"
        )

    def summary(self) -> str:
        """:meth:`verdict_line` and what the audit could have caught, in one line (what
        ``print(result)`` shows)."""
        return f"{self.verdict_line()}; {self.canaries} canaries {caught(self.power, self.power_unsimulated)}"

    def __str__(self) -> str:
        return self.summary()

    @property
    def power(self) -> Power | None:
        """What an exactly-claimed mechanism shows at this many canaries, and the leak the audit
        catches (computed when first asked; cached per claim)."""
        return one_run_power(self.power_claim)

    def to_dict(self) -> dict[str, Any]:
        power = self.power
        return {
            "one_run": True,
            "canaries": self.canaries,
            "members": self.members,
            "guesses": self.guesses,
            "correct": self.correct,
            "one_sided": self.one_sided,
            "claimed_epsilon": self.epsilon,
            "delta": self.delta,
            "confidence": self.confidence,
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "bounds": dict(self.bounds),
            "epsilon_violation": self.epsilon_violation,
            "epsilon_lower_bound_profile": self.epsilon_lower_bound_profile,
            "profile_violation": self.profile_violation,
            "violation": self.violation,
            "guess_sets": self.guess_sets,
            "one_sided_sets": self.one_sided_sets,
            "level_per_test": self.level_per_test,
            "epsilon_estimate": self.epsilon_estimate.to_dict(),
            "tie_break": dict(self.tie_break),
            "power": None if power is None else power.to_dict(),
            "power_unsimulated": self.power_unsimulated,
            **({} if self.accounted is None else {"accounted": self.accounted.to_dict()}),
        }


def checked_canaries(scores: Any, membership: Any) -> tuple[np.ndarray, np.ndarray]:
    """The scores as finite floats and membership as 0/1, one of each per canary, or one clear error."""
    s, b = np.asarray(scores), np.asarray(membership)
    require(s.ndim == 1 and b.ndim == 1, f"scores and membership must be 1-D, got shapes {s.shape} and {b.shape}")
    require(len(s) == len(b), f"scores and membership must have one entry per canary, got {len(s)} and {len(b)}")
    require(len(s) >= MIN_CANARIES, f"a one-run audit needs at least {MIN_CANARIES} canaries, got {len(s)}")
    require(
        s.dtype.kind in "iuf" and bool(np.all(np.isfinite(s))), "scores must be finite numbers (no NaN, inf or text)"
    )
    require(b.dtype.kind in "biuf" and bool(np.all((b == 0) | (b == 1))), "membership must be 0 or 1 for every canary")
    return s.astype(float), b.astype(np.int64)


def subsampled(phases: Sequence[accounting.GaussianPhase] | None) -> bool:
    """Whether any claimed phase is Poisson-subsampled (its audits add one-sided guess sets)."""
    return any(p.sample_rate < 1 for p in phases or ())


def audit_one_run(
    scores: Any,
    membership: Any,
    *,
    claim: Claim | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    confidence: float = 0.95,
    accountant: str | None = None,
    profile_bound: bool = True,
    step: Callable[[str], None] | None = None,
    seed: int | None = None,
    label: str = "canaries",
) -> OneRunResult:
    """Test a claim (with phases, its whole trade-off curve) against one run's canaries; tied
    scores ranked by a u from the stream ``seed`` and ``label`` name (:func:`.guesses.tie_break`).

    Args:
      scores: one finite score per canary (larger: more likely in).
      membership: 1 where the canary was in the training set (each with probability ½,
        independently of everything else), 0 where not.
      claim: the claim tested (:class:`~.claim.Claim`); or state it by the keywords below.
      epsilon: the claimed ε (with ``delta``, ``phases``, ``accountant``: a Claim).
      delta: the claimed δ (0 without phases: a pure-ε claim).
      phases: the Gaussian phases the mechanism ran.
      confidence: the level of the lower bounds.
      accountant: the accountant that calibrated σ (default PLD).
      profile_bound: False skips ``epsilon_lower_bound_profile`` (seconds where subsampled; the
        verdict does not rest on it), for Monte Carlo studies of thousands of audits.
      step: told each of :data:`STEPS` as it starts (a progress bar).
      seed: the tie-break stream's seed (a recorded one replays an audit); None: one from the OS
        CSPRNG, as a seed known before the rows are written lets their writer steer the verdict.
      label: names the tie-break stream.

    Returns:
      The :class:`OneRunResult` (its ``tie_break`` records the stream).

    Raises:
      InputError: bad scores or membership, a claim that is not one thing, a bad setting.
    """
    tell = step or (lambda name: None)
    s, b = checked_canaries(scores, membership)
    require(is_real(confidence) and 0 < confidence < 1, f"confidence must be in (0, 1), got {confidence!r}")
    ties = _tie_break(s, seed, label)
    claim = claim_of(claim, epsilon=epsilon, delta=delta, phases=phases, accountant=accountant)
    require(claim.curve is None, "a one-run audit tests phases or (epsilon, delta); curve='gdp' is many-run only")
    epsilon, delta, phases = claim.epsilon, claim.delta, claim.phases
    sets = GuessSets.of(s, b, tie_break(len(s), ties["seed"], label), one_sided=subsampled(phases))
    per_set = (1 - confidence) / len(sets)
    tell(STEPS[0])
    steinke, fdp, best = _bounds(sets, delta, per_set)
    bound = float(max(steinke, fdp))
    profile_violation, profile_epsilon = _profile(phases, delta, sets, per_set, profile_bound, tell)
    return OneRunResult(
        canaries=sets.canaries,
        members=int(b.sum()),
        guesses=int(sets.guesses[best]),
        correct=int(sets.correct[best]),
        one_sided=bool(sets.one_sided[best]),
        epsilon=float(epsilon),
        delta=float(delta),
        confidence=float(confidence),
        epsilon_lower_bound=bound,
        bounds={"steinke": steinke, "fdp": fdp},
        epsilon_violation=bool(bound > epsilon),
        epsilon_lower_bound_profile=profile_epsilon,
        profile_violation=profile_violation,
        guess_sets=len(sets),
        one_sided_sets=bool(sets.one_sided.any()),
        level_per_test=per_set,
        epsilon_estimate=gaussian_pair(s[b == 1], s[b == 0], delta, confidence),
        tie_break=ties,
        power_claim=one_run_power_claim(epsilon, delta, phases=phases, canaries=len(s), confidence=confidence),
        accounted=Accounted.of(epsilon, delta, phases, claim.accountant),
        power_unsimulated=one_run_unsimulated(tuple(phases or ())),
    )


def _profile(
    phases: Sequence[accounting.GaussianPhase] | None,
    delta: float,
    sets: GuessSets,
    per_set: float,
    profile_bound: bool,
    tell: Callable[[str], None],
) -> tuple[bool | None, float | None]:
    """With phases: whether the claimed curve is rejected, and (``profile_bound``) the largest
    ε of the claimed family it rejects; None for each without."""
    if not phases:
        return None, None
    tell(STEPS[1])
    violation = _claimed_curve_rejected(phases, sets, per_set)
    tell(STEPS[2])
    return violation, _profile_epsilon(phases, delta, sets, per_set) if profile_bound else None


def _bounds(sets: GuessSets, delta: float, per_set: float) -> tuple[float, float, int]:
    """The largest ε each test rejects over the guess sets (Steinke et al.'s, the f-DP line's),
    and the set where the larger one is reached."""
    steinke = np.array([largest_rejected(sets.canaries, r, v, delta, per_set) for r, v in sets.pairs()])
    fdp = largest_rejected_curve(lambda grid: LineCurves.approximate(grid, delta), sets, per_set)
    return float(steinke.max()), float(fdp.max()), int(np.argmax(np.maximum(steinke, fdp)))


def _tie_break(scores: np.ndarray, seed: int | None, label: str) -> dict[str, Any]:
    """The record of the stream that ranks tied scores: its seed (the caller's, checked, or one
    from the OS CSPRNG), its label, and how many scores tie."""
    require(
        seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0),
        f"seed must be None or an integer >= 0, got {seed!r}",
    )
    require(isinstance(label, str) and label != "", f"label must be a non-empty string, got {label!r}")
    return {
        "stream": "audit-tie-break",
        "seed": secure_root() if seed is None else int(seed),
        "seed_from": "the OS CSPRNG" if seed is None else "the caller",
        "label": label,
        "tied": tied(scores),
    }


def full_batch_mu(phases: Sequence[accounting.GaussianPhase]) -> float:
    """μ = √(Σ T/σ²): full-batch Gaussian phases compose to exactly μ-GDP (Dong, Roth & Su, Cor. 3.3)."""
    return float(np.sqrt(sum(p.steps / p.noise_multiplier**2 for p in phases)))


def _claimed_curve_rejected(phases: Sequence[accounting.GaussianPhase], sets: GuessSets, alpha: float) -> bool:
    """Whether some set rejects the claimed phases' curve: by f-DP on the exact μ-GDP curve at full
    batch (no PLD built there), else on the PLD profile by both methods."""
    if not subsampled(phases):
        curve = GaussianCurves(np.array([full_batch_mu(phases)]))
        return bool(rejects(curve, sets.canaries, sets.guesses, sets.correct, alpha).any())
    return Profile.of(phases).rejects(sets, alpha)


def _profile_epsilon(phases: Sequence[accounting.GaussianPhase], delta: float, sets: GuessSets, alpha: float) -> float:
    """The largest ε (optimistic PLD, at δ) of the claimed phases with σ scaled by c whose curve
    is still rejected; 0 when none at or above the floor is. At full batch the family is μ-GDP,
    searched by f-DP on a grid of μ; subsampled, c is bisected, each curve tested by both methods."""
    if not subsampled(phases):
        mu = float(largest_rejected_curve(GaussianCurves, sets, alpha).max())
        return accounting.gdp_epsilon_of_mu(mu, delta) if mu > 0 else 0.0

    def scaled(c: float) -> list[accounting.GaussianPhase]:
        return [replace(p, noise_multiplier=p.noise_multiplier * c) for p in phases]

    def violated(c: float) -> bool:
        return Profile.of(scaled(c), BISECTION_INTERVAL).rejects(sets, alpha)

    floor = min(1.0, BISECTION_MIN_SIGMA / min(p.noise_multiplier for p in phases))
    found = scale_threshold(violated, 1.0, 2.0, floor, BISECTION_RATIO)
    if found is None:
        return 0.0
    return float(accounting.optimistic_epsilon(scaled(found[1]), delta))
