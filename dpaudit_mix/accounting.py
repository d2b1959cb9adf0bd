"""Accounting (DESIGN §5): ε of (subsampled) Gaussian mechanisms from library accountants.

Every ε we claim comes from opacus (`rdp`, `prv`) or Google dp_accounting (`pld`). The analytic
Gaussian-DP formula for full batch is here only as an independent check (Dong, Roth & Su 2019,
Cor. 2.13: T-fold composition of a Gaussian with noise multiplier σ is μ-GDP with μ = √T/σ).
The neighbouring relation is add/remove of one example (or one user).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import dp_accounting
import numpy as np
from absl import logging as absl_logging
from opacus.accountants import PRVAccountant, RDPAccountant
from scipy.optimize import brentq
from scipy.stats import norm

from .errors import require

ACCOUNTANTS = ("rdp", "prv", "pld")
#: the largest ε we calibrate for: beyond it a guarantee means little, and the PLD accountant's
#: time and memory grow with ε (ε = 50 already takes ~17 s and 0.7 GB for a single step).
MAX_EPSILON = 100.0
#: the accountant used to calibrate σ for a release (a pessimistic PLD bound).
DEFAULT_ACCOUNTANT = "pld"


@dataclass(frozen=True)
class GaussianPhase:
    """T steps of the (Poisson-subsampled, rate q) Gaussian mechanism with multiplier σ."""

    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        require(self.noise_multiplier > 0, f"noise multiplier must be > 0, got {self.noise_multiplier}")
        require(0 < self.sample_rate <= 1, f"sample rate q must be in (0, 1], got {self.sample_rate}")
        require(self.steps >= 1, f"steps T must be >= 1, got {self.steps}")


def check_epsilon(epsilon: float) -> None:
    require(0 < epsilon <= MAX_EPSILON, f"epsilon must be in (0, {MAX_EPSILON:g}], got {epsilon}")


def check_delta(delta: float) -> None:
    require(0 < delta < 1, f"delta must be in (0, 1), got {delta}")


def _pld_event(phase: GaussianPhase) -> dp_accounting.DpEvent:
    event: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(phase.noise_multiplier)
    if phase.sample_rate < 1:
        event = dp_accounting.PoissonSampledDpEvent(phase.sample_rate, event)
    return dp_accounting.SelfComposedDpEvent(event, phase.steps)


def epsilon(phases: Sequence[GaussianPhase], delta: float, accountant: str = DEFAULT_ACCOUNTANT) -> float:
    """ε at ``delta`` of the sequential composition of ``phases`` under ``accountant``."""
    check_delta(delta)
    require(accountant in ACCOUNTANTS, f"unknown accountant {accountant!r}; choose from {ACCOUNTANTS}")
    require(len(phases) >= 1, "nothing to account")
    if accountant == "pld":
        pld = dp_accounting.pld.PLDAccountant()
        pld.compose(dp_accounting.ComposedDpEvent([_pld_event(p) for p in phases]))
        return float(pld.get_epsilon(delta))
    opacus_acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    opacus_acc.history = [(p.noise_multiplier, p.sample_rate, p.steps) for p in phases]
    # opacus' PRV takes log(1 − q) = −inf at q = 1 (harmless), and RDP warns when the best order
    # is the largest it tries (a looser, still valid bound): neither is for our users' eyes.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", UserWarning)
        return float(opacus_acc.get_epsilon(delta))


def google_rdp_epsilon(phases: Sequence[GaussianPhase], delta: float) -> float:
    """ε from dp_accounting's RDP accountant: a second, independent RDP implementation to check
    opacus' against (it logs a warning per order it drops; those are silenced)."""
    check_delta(delta)
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        accountant = dp_accounting.rdp.RdpAccountant()
        accountant.compose(dp_accounting.ComposedDpEvent([_pld_event(p) for p in phases]))
        return float(accountant.get_epsilon(delta))
    finally:
        absl_logging.set_verbosity(verbosity)


def epsilons(phases: Sequence[GaussianPhase], delta: float) -> dict[str, float]:
    """ε under every accountant, keyed by name."""
    return {name: epsilon(phases, delta, name) for name in ACCOUNTANTS}


def calibrate(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = DEFAULT_ACCOUNTANT,
    rel_tol: float = 1e-3,
    prior: tuple[GaussianPhase, ...] = (),
) -> float:
    """The smallest σ (to ``rel_tol``) with ε(σ) ≤ target: the returned σ never overshoots ε.

    ``prior`` phases run first on the same data (sequential composition): σ is then for the
    last phase, so that all of them together spend at most the target.
    """
    check_epsilon(target_epsilon)
    check_delta(delta)
    GaussianPhase(1.0, sample_rate, steps)  # validates q and T
    if prior:
        spent = epsilon(prior, delta, accountant)
        require(spent < target_epsilon, f"the earlier phases already spend ε = {spent:.4g} of {target_epsilon:g}")

    def eps(sigma: float) -> float:
        return epsilon([*prior, GaussianPhase(sigma, sample_rate, steps)], delta, accountant)

    # Bracket from a start point: RDP is fast and close above the tighter accountants, so start
    # there with small multiplicative moves (huge-ε σ, where PLD is slow, are never evaluated).
    if accountant == "rdp":
        sigma, factor = 1.0, 2.0
    else:
        sigma, factor = calibrate(target_epsilon, delta, sample_rate, steps, "rdp", rel_tol, prior), 1.1
    if eps(sigma) > target_epsilon:
        while eps(sigma * factor) > target_epsilon:
            sigma *= factor
            require(sigma < 1e6, f"no noise multiplier reaches epsilon {target_epsilon}")
        low, high = sigma, sigma * factor
    else:
        while eps(sigma / factor) <= target_epsilon and sigma > 1e-3:
            sigma /= factor
        low, high = sigma / factor, sigma
    # Invariant: eps(low) > target >= eps(high); keep `high` so the answer is always valid.
    while high - low > rel_tol * high:
        mid = 0.5 * (low + high)
        if eps(mid) <= target_epsilon:
            high = mid
        else:
            low = mid
    return high


def gdp_epsilon(noise_multiplier: float, steps: int, delta: float) -> float:
    """Exact ε of T full-batch Gaussian steps via μ-GDP, μ = √T/σ (Dong et al., Cor. 2.13).

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (their Cor. 2.13), solved for ε.
    """
    check_delta(delta)
    mu = np.sqrt(steps) / noise_multiplier

    def delta_of(eps: float) -> float:
        # log-domain second term: e^ε Φ(b) overflows for large ε while the product is tiny.
        return float(norm.cdf(-eps / mu + mu / 2) - np.exp(eps + norm.logcdf(-eps / mu - mu / 2)))

    if delta_of(0.0) <= delta:
        return 0.0
    high = 1.0
    while delta_of(high) > delta:
        high *= 2
    return float(brentq(lambda e: delta_of(e) - delta, 0.0, high, xtol=1e-12))


def parallel(*costs: tuple[float, float]) -> tuple[float, float]:
    """Mechanisms on disjoint data: the release is (max ε, max δ)-DP."""
    require(len(costs) >= 1, "nothing to compose")
    return max(c[0] for c in costs), max(c[1] for c in costs)
