"""The verification checks: accountants against each other, calibration, monotonicity, the
noise the learner really adds, and an empirical audit of the learner against the claim.

Each check returns a :class:`CheckResult` with every case it evaluated, so a failure names the
exact (σ, q, T, δ) or setting that broke. Tolerances are module constants with their reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from .accountant_checks import calibration_round_trip, cross_accountant, monotonicity
from .dpsgd_checks import dpsgd_probe_problem, empirical_dpsgd, one_run_dpsgd
from .learner_checks import empirical_soundness, noise_conformance, probe_problem
from .levels import FULL, LEVELS, QUICK, AuditPoint, CheckResult, DPSGDPoint, Level, OneRunPoint
from .parts import ACCOUNTANT, LEARNER, OPACUS, USER_DPSGD, WIRING
from .variants import Variant

__all__ = [
    "CHECKS",
    "FULL",
    "LEVELS",
    "QUICK",
    "AuditPoint",
    "Check",
    "CheckResult",
    "DPSGDPoint",
    "Level",
    "OneRunPoint",
    "calibration_round_trip",
    "cross_accountant",
    "dpsgd_probe_problem",
    "empirical_dpsgd",
    "empirical_soundness",
    "monotonicity",
    "noise_conformance",
    "one_run_dpsgd",
    "probe_problem",
]


@dataclass(frozen=True)
class Check:
    """A check, and the parts of a release it exercises (a mutant elsewhere cannot change it)."""

    name: str
    title: str
    uses: frozenset[str]
    run: Callable[[Variant, Level], CheckResult]


CHECKS: tuple[Check, ...] = (
    Check("cross_accountant", "Cross-accountant agreement", frozenset({ACCOUNTANT}), cross_accountant),
    Check("calibration_round_trip", "Calibration round trip", frozenset({ACCOUNTANT}), calibration_round_trip),
    Check("monotonicity", "Monotonicity in σ, T and q", frozenset({ACCOUNTANT}), monotonicity),
    Check("noise_conformance", "Noise the learner adds", frozenset({ACCOUNTANT, WIRING, LEARNER}), noise_conformance),
    Check(
        "empirical_soundness",
        "Empirical white-box audit",
        frozenset({ACCOUNTANT, WIRING, LEARNER}),
        empirical_soundness,
    ),
    Check(
        "empirical_opacus",
        "Empirical audit of the pipeline's Opacus DP-SGD",
        frozenset({ACCOUNTANT, OPACUS}),
        partial(empirical_dpsgd, kind="opacus"),
    ),
    Check(
        "empirical_user_dpsgd",
        "Empirical audit of the pipeline's user-level DP-SGD",
        frozenset({ACCOUNTANT, USER_DPSGD}),
        partial(empirical_dpsgd, kind="user-dpsgd"),
    ),
    Check(
        "one_run_opacus",
        "One-run audit of the pipeline's Opacus finetune (SmallCNN, canaries)",
        frozenset({ACCOUNTANT, OPACUS}),
        partial(one_run_dpsgd, kind="opacus"),
    ),
    Check(
        "one_run_user_dpsgd",
        "One-run audit of the pipeline's user-level DP-SGD (canary users)",
        frozenset({ACCOUNTANT, USER_DPSGD}),
        partial(one_run_dpsgd, kind="user-dpsgd"),
    ),
)
