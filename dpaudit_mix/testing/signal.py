"""Test 2 of :func:`.dpsgd.check_dpsgd` at a size, before any run: the one-sided z-test of the
member canaries' signal over the noise scale, and its power against a leak (σ/c, or c times the
q or the clip the accountant was told), which sizes a check to what it must catch."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import accounting
from ..audit.power import DETECTS_WITH, LEAKS


@dataclass(frozen=True)
class Recorded:
    """What the accountant recorded for a run: one (σ, q) for T steps, and its ε at δ."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    epsilon: float

    @property
    def phase(self) -> accounting.GaussianPhase:
        return accounting.GaussianPhase(self.noise_multiplier, self.sample_rate, self.steps)


@dataclass(frozen=True)
class SignalTest:
    """Test 2's one-sided z-test of the members' signal/noise, at a size: n member values over
    ``steps`` steps in all, the noise scale of each step estimated from ``canaries`` rows.

    Each value is b c/σ + z with b ~ Bernoulli(q), z ~ N(0, 1), c the leak (c = 1: the claim;
    a noise σ/c, or a sampling rate or clip c times the claimed one, all scale the signal by c):
    mean c q/σ, variance 1 + q(1 − q) c²/σ². The scale estimated from m rows a step adds a
    relative error of about 1/√(2m) per step, √T-fold fewer over the run's steps. So the mean
    is normal with standard error ``se(c)``, and the test flags z = (mean − q/σ)/se(1) above the
    normal quantile of 1 − alpha: its power at c is Φ(((c − 1) q/σ − z_α se(1)) / se(c))."""

    claim: Recorded
    values: int
    steps: int
    canaries: int
    alpha: float

    @property
    def expected(self) -> float:
        return self.claim.sample_rate / self.claim.noise_multiplier

    def se(self, leak: float = 1.0) -> float:
        q, sigma, mean = self.claim.sample_rate, self.claim.noise_multiplier, leak * self.expected
        variance = 1 + q * (1 - q) * leak**2 / sigma**2
        return math.sqrt(variance / self.values + mean**2 / (2 * self.canaries * self.steps))

    def z(self, mean: float) -> float:
        return (mean - self.expected) / self.se()

    def power(self, leak: float) -> float:
        """P[flagged] when the signal is ``leak`` times the claim's (the normal approximation above)."""
        from scipy.special import ndtr

        shift = (leak - 1) * self.expected - normal_quantile(1 - self.alpha) * self.se()
        return float(ndtr(shift / self.se(leak)))

    def detects(self) -> float | None:
        """The smallest c on the power grid (σ/c) flagged with ≥ 90 %; None beyond σ/10."""
        return next((c for c in LEAKS if self.power(c) >= DETECTS_WITH), None)


def signal_test(claim: Recorded, runs: int, canaries: int, steps: int, alpha: float) -> SignalTest:
    """The signal test of ``runs`` runs of ``canaries`` canaries, ``steps`` steps each, before
    membership is drawn (each canary is in with probability ½)."""
    return SignalTest(claim, max(1, runs * canaries * steps // 2), runs * steps, canaries, alpha)


def normal_quantile(p: float) -> float:
    from scipy.special import ndtri

    return float(ndtri(p))
