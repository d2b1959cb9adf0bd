"""The claimed trade-off curve f(α): the least FNR any test at FPR α may have under the claim.

An (ε, δ)-DP claim is one point of the mechanism's privacy profile; the accountant that
calibrated σ knows the whole profile δ(ε), and with it the trade-off curve (Dong, Roth & Su 2019,
Prop. 2.12) f(α) = sup_ε max(0, 1 − δ(ε) − e^ε α, e^{−ε}(1 − δ(ε) − α)). A CP point (FPR_ub,
FNR_ub) strictly below f is a rigorous violation at the CP confidence: with that confidence the
true error rates are no smaller, and f is non-increasing.

Full batch: T Gaussian steps of multiplier σ are exactly μ-GDP, f(α) = Φ(Φ⁻¹(1−α) − μ), so the
claim is the μ whose GDP curve is (ε, δ)-DP (≈ √T/σ_calibrated, a little above it since the
PLD calibration is pessimistic), and "below f" is μ_LB > μ. We take μ from the claim (ε, δ), not
from σ: a σ or accountant bug must not move the yardstick it is measured with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt
from scipy.stats import norm

from .. import accounting
from .bounds import gdp_mu

#: ε grid of a profile: from 0 to where δ(ε) falls to this (beyond, the curve is ≈ the axes).
PROFILE_DELTA_FLOOR = 1e-12
PROFILE_POINTS = 2000


class TradeOff(Protocol):
    def fnr_floor(self, fpr: npt.ArrayLike) -> np.ndarray: ...

    def violated(self, fpr_ub: npt.ArrayLike, fnr_ub: npt.ArrayLike) -> np.ndarray: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class GaussianTradeOff:
    """μ-GDP: f(α) = Φ(Φ⁻¹(1−α) − μ)."""

    mu: float

    def fnr_floor(self, fpr: npt.ArrayLike) -> np.ndarray:
        return np.asarray(norm.cdf(norm.isf(fpr) - self.mu))

    def violated(self, fpr_ub: npt.ArrayLike, fnr_ub: npt.ArrayLike) -> np.ndarray:
        return gdp_mu(fpr_ub, fnr_ub) > self.mu

    def describe(self) -> dict[str, Any]:
        return {"kind": "gdp", "mu": self.mu}


@dataclass(frozen=True)
class ProfileTradeOff:
    """The curve of a privacy profile δ(ε) given on a grid of ε ≥ 0 (a lower envelope of the
    true curve when δ is pessimistic, so violations stay rigorous)."""

    epsilons: tuple[float, ...]
    deltas: tuple[float, ...]

    def fnr_floor(self, fpr: npt.ArrayLike) -> np.ndarray:
        alpha = np.asarray(fpr, dtype=float)[..., None]
        eps, slack = np.asarray(self.epsilons), 1 - np.asarray(self.deltas)
        with np.errstate(over="ignore", invalid="ignore"):  # e^ε α = inf only where the line is far below 0
            lines = np.maximum(slack - np.exp(eps) * alpha, np.exp(-eps) * (slack - alpha))
        return cast(np.ndarray, np.maximum(0.0, lines.max(axis=-1)))

    def violated(self, fpr_ub: npt.ArrayLike, fnr_ub: npt.ArrayLike) -> np.ndarray:
        return np.asarray(fnr_ub) < self.fnr_floor(fpr_ub)

    def describe(self) -> dict[str, Any]:
        return {"kind": "pld_profile", "epsilon_max": self.epsilons[-1], "grid_points": len(self.epsilons)}


@dataclass(frozen=True)
class PureTradeOff:
    """(ε, 0)-DP: f(α) = max(0, 1 − e^ε α, e^−ε (1 − α)) (Kairouz, Oh & Viswanath 2015, Thm 2.1;
    Dong, Roth & Su 2019, eq. (5) at δ = 0): the curve of a pure-ε claim, which the Laplace
    mechanism and randomized response meet."""

    epsilon: float

    def fnr_floor(self, fpr: npt.ArrayLike) -> np.ndarray:
        return ProfileTradeOff((self.epsilon,), (0.0,)).fnr_floor(fpr)

    def violated(self, fpr_ub: npt.ArrayLike, fnr_ub: npt.ArrayLike) -> np.ndarray:
        return np.asarray(fnr_ub) < self.fnr_floor(fpr_ub)

    def describe(self) -> dict[str, Any]:
        return {"kind": "pure_epsilon", "epsilon": self.epsilon}


def claimed_tradeoff(
    epsilon: float, delta: float, phases: Sequence[accounting.GaussianPhase] | None = None
) -> GaussianTradeOff | ProfileTradeOff | PureTradeOff:
    """The trade-off curve a release calibrated to (ε, δ) claims: μ-GDP from ε when every phase is
    full batch (or none is given: the Gaussian curve is then exact), else the PLD privacy profile
    of ``phases`` (subsampled Gaussian; no Gaussian curve bounds it); at δ = 0 without phases the
    pure-ε curve (no Gaussian curve is pure ε-DP)."""
    if not phases and delta == 0:
        return PureTradeOff(epsilon)
    if not phases or all(p.sample_rate == 1.0 for p in phases):
        return GaussianTradeOff(accounting.gdp_mu_of_epsilon(epsilon, delta))
    return profile_tradeoff(phases)


def profile_tradeoff(phases: Sequence[accounting.GaussianPhase], interval: float | None = None) -> ProfileTradeOff:
    """The trade-off curve of ``phases``' PLD privacy profile (``interval``: its discretisation)."""
    grid, deltas = accounting.privacy_profile_curve(phases, PROFILE_DELTA_FLOOR, PROFILE_POINTS, interval)
    return ProfileTradeOff(tuple(grid.tolist()), tuple(deltas.tolist()))


#: the search's curves use a PLD discretisation 10× coarser than the accountant's (about 8×
#: faster to build): still pessimistic, so each is a lower envelope of its true curve and a
#: point below it is below the true curve too; and with connect-the-dots its ε is within 0.1%
#: of the accountant's at T = 1000 (1e-2 was 6% off there, and under-reported ε′ by as much).
BISECTION_INTERVAL = 1e-3
#: a first, cheap search on curves 100× coarser (about 8× faster again) only places the fine
#: one: its answer is a start, never a verdict (every bound rests on fine curves alone).
SCOUT_INTERVAL, SCOUT_RATIO = 1e-2, 1.02
#: the bracket of the search: σ at least MIN_SIGMA (below it PLDs grow slow and ε′ is large
#: anyway) and at most MAX_SCALE times the claimed one; it stops when the ends are within RATIO.
BISECTION_MIN_SIGMA, BISECTION_MAX_SCALE, BISECTION_RATIO = 0.3, 64.0, 1.005
#: the fine search's first step from the scout's answer (the scout's c★ sits a few % high).
FINE_STEP = 1.05


def scale_threshold(
    violated: Callable[[float], bool], start: float, step: float, floor: float, ratio: float
) -> tuple[float, float] | None:
    """(low, high) within ``ratio`` with violated(high) and not violated(low), stepping by ``step``
    from ``start`` and then bisecting in log c; (floor, floor) when violated down to ``floor``;
    None when not violated up to BISECTION_MAX_SCALE. The curves rise with c, so one threshold."""
    if violated(start):
        high, low = start, max(start / step, floor)
        while violated(low):
            if low <= floor:
                return floor, floor
            high, low = low, max(low / step, floor)
    else:
        low, high = start, min(start * step, BISECTION_MAX_SCALE)
        while not violated(high):
            if high >= BISECTION_MAX_SCALE:
                return None
            low, high = high, min(high * step, BISECTION_MAX_SCALE)
    while high / low > ratio:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if violated(middle) else (middle, high)
    return low, high


def epsilon_lower_bound_profile(
    phases: Sequence[accounting.GaussianPhase], fpr_ub: npt.ArrayLike, fnr_ub: npt.ArrayLike, delta: float
) -> float:
    """The largest ε′ whose calibrated curve of the same shape the CP points still violate.

    The family is ``phases`` with every σ scaled by one factor c (same q and T): its curves rise
    with c, so the points violate exactly the curves of c above some c★. A scout on coarse
    curves places c★; the fine search steps from there and bisects in log c. ε′ is the
    optimistic PLD's ε at ``delta`` of the violated end (never above its true ε): a rigorous
    lower bound on the ε of that family, for any q (for q = 1 it is the GDP bound, up to the
    search's resolution). 0 when even MAX_SCALE times the claimed σ is not violated.
    """

    def scaled(c: float) -> list[accounting.GaussianPhase]:
        return [replace(p, noise_multiplier=p.noise_multiplier * c) for p in phases]

    def violated_at(interval: float) -> Callable[[float], bool]:
        return lambda c: bool(np.any(profile_tradeoff(scaled(c), interval).violated(fpr_ub, fnr_ub)))

    floor = min(1.0, BISECTION_MIN_SIGMA / min(p.noise_multiplier for p in phases))
    scout = scale_threshold(violated_at(SCOUT_INTERVAL), 1.0, 2.0, floor, SCOUT_RATIO)
    start, step = (BISECTION_MAX_SCALE, 2.0) if scout is None else (scout[1], FINE_STEP)
    fine = scale_threshold(violated_at(BISECTION_INTERVAL), start, step, floor, BISECTION_RATIO)
    return 0.0 if fine is None else accounting.optimistic_epsilon(scaled(fine[1]), delta)
