"""One-run audits: m canaries, each in the training set independently with probability ½, one
training run, one score per canary (larger = "more likely in").

**The (ε, δ) bound** (Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training
Run", their main theorem with its δ term). An auditor guesses "in" for the k highest scores and
"out" for the k lowest and abstains on the rest: r = 2k guesses, v of them correct. If the
mechanism is (ε, δ)-DP, then for every v

    P[V ≥ v] ≤ β(v) + 2mδ · max_{1 ≤ i ≤ v} P[v − i ≤ B < v] / i,   B ~ Bin(r, e^ε / (1 + e^ε)),

with β(v) = P[B ≥ v] (:func:`p_value`). The ε lower bound is the largest ε that this p-value
rejects at the audit's level. The guesses depend on the scores alone (never on membership), and
k runs over a grid fixed before any score is seen (:func:`guess_sizes`), Bonferroni across it:
the level holds whatever k wins.

**The profile test.** A mechanism whose privacy profile is δ(ε′) (the PLD of the claimed phases)
is (ε′, δ(ε′))-DP for every ε′ at once. So P[V ≥ v] ≤ min_ε′ p-value(ε′, δ(ε′); v) for every v,
a bound that falls with v: rejecting when it is at most α keeps the level α, with no correction
for the many ε′ (the minimum is taken before anything random). A pessimistic δ(ε′) (the
accountant's) only raises each p-value. ``epsilon_lower_bound_profile`` is then the largest ε of
the claimed phases with σ scaled by one factor c (the family the multi-run profile bound uses,
:func:`.profile.epsilon_lower_bound_profile`) whose profile the guesses still reject.

With phases, the two tests share the level (α/2 each), so that the verdict, which rests on
both, keeps it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.special import expit
from scipy.stats import binom

from .. import accounting
from ..errors import is_real, require
from .profile import BISECTION_INTERVAL, BISECTION_MIN_SIGMA, BISECTION_RATIO, scale_threshold
from .scores import check_claim

#: the fewest canaries a one-run audit takes (its smallest guess set has MIN_GUESSES per side).
MIN_CANARIES = 20
MIN_GUESSES = 5
#: how many guess sizes k are tried (geometric from MIN_GUESSES or m/500 to m/2), α shared.
GUESS_SIZES = 12
#: the profile curves' ε grid: this many points of the PLD profile (a subset: the minimum over
#: fewer points is larger, so it stays a valid bound), down to δ(ε′) = PROFILE_FLOOR.
PROFILE_GRID, PROFILE_FLOOR = 64, 1e-12
#: the ε search's upper end and resolution.
EPSILON_MAX, EPSILON_TOLERANCE = 50.0, 1e-4


def p_value(canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """The bound on P[V ≥ ``correct``] of ``guesses`` guesses among ``canaries`` under (ε, δ)-DP
    (the module's first formula)."""
    q = float(expit(epsilon))
    tail = float(binom.sf(correct - 1, guesses, q))
    if delta == 0 or correct == 0:
        return min(1.0, tail)
    i = np.arange(1, correct + 1)
    below = np.cumsum(binom.pmf(correct - i, guesses, q))  # P[correct − i ≤ B < correct]
    return min(1.0, tail + 2 * canaries * delta * float(np.max(below / i)))


def guess_sizes(canaries: int) -> np.ndarray:
    """k of each guess set (k "in", k "out"): geometric, fixed by the number of canaries alone."""
    low = max(MIN_GUESSES, canaries // 500)
    return np.unique(np.round(np.geomspace(low, canaries // 2, GUESS_SIZES)).astype(int))


def _counts(scores: np.ndarray, membership: np.ndarray) -> list[tuple[int, int]]:
    """(r, v) of every guess set: the k highest scores guessed in, the k lowest out."""
    order = np.argsort(scores, kind="stable")
    inside = membership[order].astype(np.int64)
    top = np.cumsum(inside[::-1])  # members among the j highest, j = 1..m
    bottom = np.cumsum(1 - inside)  # non-members among the j lowest
    return [(2 * int(k), int(top[k - 1] + bottom[k - 1])) for k in guess_sizes(len(scores))]


def _largest_rejected(canaries: int, guesses: int, correct: int, delta: float, alpha: float) -> float:
    """The largest ε whose (ε, δ) p-value is at most α (0 when even ε = 0 is not rejected)."""
    if p_value(canaries, guesses, correct, 0.0, delta) > alpha:
        return 0.0
    low, high = 0.0, 1.0
    while high < EPSILON_MAX and p_value(canaries, guesses, correct, high, delta) <= alpha:
        low, high = high, min(2 * high, EPSILON_MAX)
    while high - low > EPSILON_TOLERANCE:
        middle = (low + high) / 2
        low, high = (middle, high) if p_value(canaries, guesses, correct, middle, delta) <= alpha else (low, middle)
    return low


@dataclass(frozen=True)
class Profile:
    """A privacy profile as (ε′, δ(ε′)) points: what the profile test takes the minimum over."""

    epsilons: tuple[float, ...]
    deltas: tuple[float, ...]

    @classmethod
    def of(cls, phases: Sequence[accounting.GaussianPhase], interval: float | None = None) -> Profile:
        grid, deltas = accounting.privacy_profile_curve(phases, PROFILE_FLOOR, PROFILE_GRID, interval)
        return cls(tuple(float(e) for e in grid), tuple(float(d) for d in deltas))

    def p_value(self, canaries: int, guesses: int, correct: int) -> float:
        return min(p_value(canaries, guesses, correct, e, d) for e, d in zip(self.epsilons, self.deltas, strict=True))


@dataclass(frozen=True)
class OneRunResult:
    """A one-run audit: ``guesses`` (r) and ``correct`` (v) of the guess set behind the (ε, δ)
    bound; ``profile_violation`` and ``epsilon_lower_bound_profile`` are None without phases."""

    canaries: int
    members: int
    guesses: int
    correct: int
    epsilon: float
    delta: float
    confidence: float
    epsilon_lower_bound: float
    epsilon_violation: bool
    epsilon_lower_bound_profile: float | None
    profile_violation: bool | None
    guess_sets: int
    level_per_test: float

    @property
    def violation(self) -> bool:
        return self.epsilon_violation or bool(self.profile_violation)

    def to_dict(self) -> dict[str, Any]:
        return {
            "one_run": True,
            "canaries": self.canaries,
            "members": self.members,
            "guesses": self.guesses,
            "correct": self.correct,
            "claimed_epsilon": self.epsilon,
            "delta": self.delta,
            "confidence": self.confidence,
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "epsilon_violation": self.epsilon_violation,
            "epsilon_lower_bound_profile": self.epsilon_lower_bound_profile,
            "profile_violation": self.profile_violation,
            "violation": self.violation,
            "guess_sets": self.guess_sets,
            "level_per_test": self.level_per_test,
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


def audit_one_run(
    scores: Any,
    membership: Any,
    *,
    epsilon: float,
    delta: float,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    confidence: float = 0.95,
    accountant: str = accounting.DEFAULT_ACCOUNTANT,
    profile_bound: bool = True,
) -> OneRunResult:
    """Test the claim (ε, δ) (and, with ``phases``, its whole privacy profile) against one run's
    canary ``scores`` and their ``membership`` (1 = in the training set, drawn with probability
    ½ each, independently of everything else). ``profile_bound`` False skips the search for
    ``epsilon_lower_bound_profile`` (seconds; the verdict does not rest on it): Monte Carlo
    studies of the verdict run thousands of audits."""
    s, b = checked_canaries(scores, membership)
    require(is_real(confidence) and 0 < confidence < 1, f"confidence must be in (0, 1), got {confidence!r}")
    check_claim(epsilon, delta, phases, accountant)
    m = len(s)
    counts = _counts(s, b)
    level = (1 - confidence) / (2 if phases else 1)  # the verdict rests on one test, or on both
    per_set = level / len(counts)
    bounds = [_largest_rejected(m, r, v, delta, per_set) for r, v in counts]
    best = int(np.argmax(bounds))
    profile_epsilon = profile_violation = None
    if phases:
        rejects = _profile_rejects(m, counts, per_set)
        profile_violation = rejects(Profile.of(phases))
        profile_epsilon = _profile_epsilon(phases, delta, rejects) if profile_bound else None
    return OneRunResult(
        canaries=m,
        members=int(b.sum()),
        guesses=counts[best][0],
        correct=counts[best][1],
        epsilon=float(epsilon),
        delta=float(delta),
        confidence=float(confidence),
        epsilon_lower_bound=float(bounds[best]),
        epsilon_violation=bool(bounds[best] > epsilon),
        epsilon_lower_bound_profile=profile_epsilon,
        profile_violation=profile_violation,
        guess_sets=len(counts),
        level_per_test=level,
    )


def _profile_rejects(canaries: int, counts: list[tuple[int, int]], alpha: float) -> Callable[[Profile], bool]:
    """Whether some guess set rejects a profile at α (Bonferroni across the guess sets)."""

    def rejects(profile: Profile) -> bool:
        return any(profile.p_value(canaries, r, v) <= alpha for r, v in counts)

    return rejects


def _profile_epsilon(
    phases: Sequence[accounting.GaussianPhase], delta: float, rejects: Callable[[Profile], bool]
) -> float:
    """The largest ε (optimistic PLD, at δ) of the claimed phases with σ scaled by c whose profile
    is still rejected; 0 when none at or above the floor is."""

    def scaled(c: float) -> list[accounting.GaussianPhase]:
        return [replace(p, noise_multiplier=p.noise_multiplier * c) for p in phases]

    def violated(c: float) -> bool:
        return rejects(Profile.of(scaled(c), BISECTION_INTERVAL))

    floor = min(1.0, BISECTION_MIN_SIGMA / min(p.noise_multiplier for p in phases))
    found = scale_threshold(violated, 1.0, 2.0, floor, BISECTION_RATIO)
    if found is None:
        return 0.0
    return float(accounting.optimistic_epsilon(scaled(found[1]), delta))
