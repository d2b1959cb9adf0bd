"""The analytic Gaussian-DP formulas (Dong, Roth & Su 2019, Cor. 2.13: T-fold composition of a
Gaussian with noise multiplier σ is μ-GDP with μ = √T/σ): an independent check of the accountants,
and the start of a calibration; never a claim."""

from __future__ import annotations

import numpy as np

from ..base.errors import is_real, require
from .phases import check_delta, check_epsilon


def gdp_delta(mu: float, epsilon: float | np.ndarray) -> float | np.ndarray:
    """δ(ε) of μ-GDP (Dong, Roth & Su 2019, Cor. 2.13): Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).

    The second term in the log domain: e^ε Φ(b) overflows for large ε while the product is tiny.
    Tested against dp_accounting's ``GaussianPrivacyLoss`` (a μ-GDP mechanism is a Gaussian with
    sensitivity 1 and noise 1/μ).
    """
    from scipy.special import log_ndtr, ndtr  # Φ and log Φ, on first use: the command line starts without scipy

    eps = np.asarray(epsilon, dtype=float)
    delta = ndtr(-eps / mu + mu / 2) - np.exp(eps + log_ndtr(-eps / mu - mu / 2))
    return float(delta) if np.ndim(delta) == 0 else delta


def gdp_epsilon_of_mu(mu: float, delta: float) -> float:
    """The ε at which a μ-GDP mechanism is (ε, δ)-DP (0 when μ ≤ 0 or δ(0) ≤ δ; +inf at δ = 0
    for μ > 0: δ(ε) > 0 at every finite ε, so no μ-GDP mechanism is pure ε-DP)."""
    require(is_real(delta) and 0 <= delta < 1, f"delta must be in [0, 1), got {delta!r}")
    require(not np.isnan(mu) and mu != np.inf, f"mu must be a number below +inf, got {mu}")
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    if delta == 0:
        return float("inf")
    high = 1.0
    while gdp_delta(mu, high) > delta:
        high *= 2
    from scipy.optimize import brentq

    return float(brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, high, xtol=1e-12))


def gdp_mu_of_epsilon(epsilon: float, delta: float) -> float:
    """The μ whose μ-GDP curve is (ε, δ)-DP exactly: the GDP claim behind a full-batch (ε, δ)."""
    check_epsilon(epsilon)
    check_delta(delta)
    high = 1.0
    while gdp_delta(high, epsilon) < delta:
        high *= 2
    from scipy.optimize import brentq

    return float(brentq(lambda m: gdp_delta(m, epsilon) - delta, 1e-12, high, xtol=1e-14))


def gdp_epsilon(noise_multiplier: float, steps: int, delta: float) -> float:
    """Exact ε of T full-batch Gaussian steps via μ-GDP, μ = √T/σ (Dong et al., Cor. 2.13)."""
    return gdp_epsilon_of_mu(np.sqrt(steps) / noise_multiplier, delta)
