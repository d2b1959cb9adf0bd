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

from collections.abc import Sequence
from dataclasses import dataclass
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
        lines = np.maximum(slack - np.exp(eps) * alpha, np.exp(-eps) * (slack - alpha))
        return cast(np.ndarray, np.maximum(0.0, lines.max(axis=-1)))

    def violated(self, fpr_ub: npt.ArrayLike, fnr_ub: npt.ArrayLike) -> np.ndarray:
        return np.asarray(fnr_ub) < self.fnr_floor(fpr_ub)

    def describe(self) -> dict[str, Any]:
        return {"kind": "pld_profile", "epsilon_max": self.epsilons[-1], "grid_points": len(self.epsilons)}


def claimed_tradeoff(
    epsilon: float, delta: float, phases: Sequence[accounting.GaussianPhase] | None = None
) -> GaussianTradeOff | ProfileTradeOff:
    """The trade-off curve a release calibrated to (ε, δ) claims: μ-GDP from ε when every phase is
    full batch (or none is given: the Gaussian curve is then exact), else the PLD privacy profile
    of ``phases`` (subsampled Gaussian; no Gaussian curve bounds it)."""
    if not phases or all(p.sample_rate == 1.0 for p in phases):
        return GaussianTradeOff(accounting.gdp_mu_of_epsilon(epsilon, delta))
    top = accounting.epsilon(phases, PROFILE_DELTA_FLOOR)
    grid = np.linspace(0.0, top, PROFILE_POINTS)
    return ProfileTradeOff(tuple(grid.tolist()), tuple(accounting.privacy_profile(phases, grid).tolist()))
