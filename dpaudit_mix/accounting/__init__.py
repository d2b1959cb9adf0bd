"""Accounting (docs/concepts/learner.md): ε of (subsampled) Gaussian mechanisms from registered accountants.

One concept per module, as dp_accounting keeps them: :mod:`.phases` (the Gaussian phases, their
events and the limits of a request), :mod:`.accountants` (the protocol, the registry and ε),
:mod:`.libraries` (the opacus and dp_accounting adapters), :mod:`.calibration` (σ for a target
ε), :mod:`.profiles` (privacy profiles and the optimistic ε), :mod:`.gdp` (the analytic
Gaussian-DP check) and :mod:`.answers` (what this process already knows). The names below are the
package's accounting API; the modules' other names are theirs.
"""

from .accountants import (
    ACCOUNTANTS,
    Accountant,
    check_accountant,
    clear_caches,
    epsilon,
    epsilon_each,
    epsilons,
    pld_epsilon,
    register_accountant,
)
from .calibration import CALIBRATE_SECONDS, CalibrationRequest, calibrate, calibrate_each
from .gdp import gdp_delta, gdp_epsilon, gdp_epsilon_of_mu, gdp_mu_of_epsilon
from .libraries import DEGENERATE_DELTA, DEGENERATE_EPSILON, DegenerateRequest, LibraryAccountant, google_rdp_epsilon
from .phases import (
    BUILTIN_ACCOUNTANTS,
    DEFAULT_ACCOUNTANT,
    MAX_EPSILON,
    MAX_NOISE_MULTIPLIER,
    MAX_STEPS,
    MIN_SAMPLE_RATE,
    GaussianPhase,
    check_delta,
    check_epsilon,
    parallel,
)
from .profiles import (
    OPTIMISTIC_COARSEST,
    OPTIMISTIC_FINEST,
    OPTIMISTIC_SHORTFALL,
    QUICK_INTERVAL,
    optimistic_epsilon,
    privacy_profile,
    privacy_profile_curve,
)

__all__ = [
    "ACCOUNTANTS",
    "BUILTIN_ACCOUNTANTS",
    "CALIBRATE_SECONDS",
    "DEFAULT_ACCOUNTANT",
    "DEGENERATE_DELTA",
    "DEGENERATE_EPSILON",
    "MAX_EPSILON",
    "MAX_NOISE_MULTIPLIER",
    "MAX_STEPS",
    "MIN_SAMPLE_RATE",
    "OPTIMISTIC_COARSEST",
    "OPTIMISTIC_FINEST",
    "OPTIMISTIC_SHORTFALL",
    "QUICK_INTERVAL",
    "Accountant",
    "CalibrationRequest",
    "DegenerateRequest",
    "GaussianPhase",
    "LibraryAccountant",
    "calibrate",
    "calibrate_each",
    "check_accountant",
    "check_delta",
    "check_epsilon",
    "clear_caches",
    "epsilon",
    "epsilon_each",
    "epsilons",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_epsilon_of_mu",
    "gdp_mu_of_epsilon",
    "google_rdp_epsilon",
    "optimistic_epsilon",
    "parallel",
    "pld_epsilon",
    "privacy_profile",
    "privacy_profile_curve",
    "register_accountant",
]
