"""Checks for a user's own privacy code, for their pytest suite and CI: ``check_accountant``
(their ε(σ, q, T, δ) and calibrator against PLD), ``check_dpsgd`` (their Opacus DP-SGD setup,
audited with Dirac canaries through their loader, clipping and noise) and ``check_mechanism``
(their release function on two neighbouring datasets). A failing check raises
:class:`CheckFailed`, an ``AssertionError`` naming what broke; a passing one returns its
:class:`Report`."""

from .accountant import DEFAULT_GRID, QUICK_GRID, Point, check_accountant
from .dpsgd import check_dpsgd
from .failure import Case, CheckFailed, Report
from .mechanism import check_mechanism

__all__ = [
    "DEFAULT_GRID",
    "QUICK_GRID",
    "Case",
    "CheckFailed",
    "Point",
    "Report",
    "check_accountant",
    "check_dpsgd",
    "check_mechanism",
]
