"""Phases and their events: the Gaussian mechanisms every accountant is asked about, the
limits a request must keep, and the checks at the boundary (docs/concepts/learner.md). The neighbouring relation is
add/remove of one example (or one user)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..base.errors import is_real, require
from ..base.specfile import check_fields

if TYPE_CHECKING:
    import dp_accounting

#: the library accountants this package registers (and cross-checks against each other).
BUILTIN_ACCOUNTANTS = ("rdp", "prv", "pld")
#: the largest ε we calibrate for: beyond it a guarantee means little, and the PLD accountant's
#: time and memory grow with ε (ε = 50 already takes ~17 s and 0.7 GB for a single step).
MAX_EPSILON = 100.0
#: the largest σ accepted: ε is already at every accountant's floor far below it, and the
#: libraries overflow or fail their own checks on much larger values (opacus at 1e8, q = 0.01).
MAX_NOISE_MULTIPLIER = 1e6
#: the most steps one phase may take: far beyond any training run here, and the accountants'
#: memory grows with T (opacus' RDP/PRV history, 1e9 steps asked for petabytes).
MAX_STEPS = 1_000_000
#: the smallest sampling rate accepted: as q → 0 the calibrated σ shrinks and the accountants'
#: discretisation grows without bound (q = 1e-6 already takes ~30 s to calibrate, 1e-9 hours).
MIN_SAMPLE_RATE = 1e-6
#: the accountant used to calibrate σ for a release (a pessimistic PLD bound).
DEFAULT_ACCOUNTANT = "pld"


@dataclass(frozen=True)
class GaussianPhase:
    """T steps of the (Poisson-subsampled, rate q) Gaussian mechanism with multiplier σ.

    Attributes:
      noise_multiplier: σ, the noise's standard deviation over the clipping norm, in (0, 10⁶].
      sample_rate: q, each example's probability of being in a step's batch, in [10⁻⁶, 1].
      steps: T, in [1, 10⁶].

    Raises:
      InputError: a field out of its range (at construction).
    """

    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        check_fields(self)
        require(
            0 < self.noise_multiplier <= MAX_NOISE_MULTIPLIER,
            f"noise multiplier must be in (0, {MAX_NOISE_MULTIPLIER:g}], got {self.noise_multiplier}",
        )
        require(
            MIN_SAMPLE_RATE <= self.sample_rate <= 1,
            f"sample rate q must be in [{MIN_SAMPLE_RATE:g}, 1] "
            f"(below it no accountant answers in reasonable time), got {self.sample_rate}",
        )
        require(1 <= self.steps <= MAX_STEPS, f"steps T must be in [1, {MAX_STEPS:,}], got {self.steps}")


def check_epsilon(epsilon: float) -> None:
    require(
        is_real(epsilon) and 0 < epsilon <= MAX_EPSILON,
        f"epsilon must be in (0, {MAX_EPSILON:g}], got {epsilon!r}",
    )


def check_delta(delta: float) -> None:
    require(is_real(delta) and 0 < delta < 1, f"delta must be in (0, 1), got {delta!r}")


def pld_event(phase: GaussianPhase) -> dp_accounting.DpEvent:
    import dp_accounting

    event: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(phase.noise_multiplier)
    if phase.sample_rate < 1:
        event = dp_accounting.PoissonSampledDpEvent(phase.sample_rate, event)
    return dp_accounting.SelfComposedDpEvent(event, phase.steps)


def check_phases(phases: Sequence[GaussianPhase]) -> None:
    """Every phase a GaussianPhase; and dp_accounting imported here, in the parent, so that each
    :func:`~.resources.bounded` child finds it loaded instead of importing it anew."""
    import dp_accounting  # noqa: F401

    require(
        all(isinstance(p, GaussianPhase) for p in phases),
        f"phases must be GaussianPhase(noise_multiplier, sample_rate, steps) values, got {list(phases)!r}",
    )


def request(phases: Sequence[GaussianPhase], delta: float) -> tuple[tuple[GaussianPhase, ...], float]:
    """A checked request (δ, at least one phase, every phase a GaussianPhase), as a cache key."""
    check_delta(delta)
    require(len(phases) >= 1, "nothing to account")
    check_phases(phases)
    return tuple(phases), float(delta)


def describe(accountant: str, phases: Sequence[GaussianPhase], delta: float) -> str:
    """A request, as a refusal names it."""
    steps = "; ".join(f"sigma {p.noise_multiplier:g}, q {p.sample_rate:g}, T {p.steps}" for p in phases)
    return f"the {accountant} accountant on {steps} at delta {delta:g}"


def parallel(*costs: tuple[float, float]) -> tuple[float, float]:
    """Mechanisms on disjoint data: the release is (max ε, max δ)-DP."""
    require(len(costs) >= 1, "nothing to compose")
    return max(c[0] for c in costs), max(c[1] for c in costs)
