"""The gate checks the accountant it calibrates with, before anything is spent (docs/concepts/release.md).

The verification checks the package's own accountants; a release may name any registered one,
and an accountant that under-reports ε calibrates too little noise for its claim, which an audit
of a few thousand runs cannot see at 1.6×. So a release calibrated by any accountant other than
the package's PLD compares that accountant's ε with dp_accounting's PLD at the release's own
(σ, q, T, δ), and a registered (not built-in) one is put through
:func:`..testing.check_accountant` on its quick grid too (no sweeps: what the gate refuses is an
under-report, which the grid finds; the sweeps are the user's CI's to run). An under-report beyond
:data:`UNDER_REPORT` refuses the release; an over-report is allowed (more noise than needed) and
said so in the manifest's ``verification.accountant_check``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import accounting
from ..testing.accountant import QUICK_GRID, check_accountant
from ..testing.failure import CheckFailed
from .refused import Refused

#: how far below dp_accounting's PLD an accountant's ε may sit, relative: the PRV/PLD slack that
#: Opacus' PRV (eps_error 0.01) keeps on the testing grid, with room to spare.
UNDER_REPORT = 0.02


def check_release_accountant(
    accountant: str, claimed: float, delta: float, phases: Sequence[accounting.GaussianPhase]
) -> dict[str, Any]:
    """The manifest's record of the accountant that calibrated ``phases`` to ``claimed`` at
    ``delta``, or :class:`.Refused` (stage ``verification``) where PLD puts them above the claim."""
    if accountant == accounting.DEFAULT_ACCOUNTANT:
        return {"accountant": accountant, "checked": False, "reason": "the package's own PLD accountant"}
    pld = accounting.epsilon(phases, delta, accounting.DEFAULT_ACCOUNTANT)
    own = accounting.epsilon(phases, delta, accountant)
    if pld > claimed * (1 + UNDER_REPORT):
        raise Refused(
            "verification",
            f"the {accountant} accountant under-reports: it puts these phases at epsilon {own:.4g} and the claim "
            f"at {claimed:g}, where dp_accounting's PLD gives {pld:.4g} at delta {delta:g} (more than "
            f'{UNDER_REPORT:.0%} above the claim); calibrate with accountant = "pld" or fix the accountant',
        )
    record: dict[str, Any] = {
        "accountant": accountant,
        "checked": True,
        "epsilon": own,
        "pld_epsilon": pld,
        "over_reports": own > pld * (1 + UNDER_REPORT),
    }
    if accountant in accounting.BUILTIN_ACCOUNTANTS:
        record["grid"] = "built in: verify-accountant's cross-accountant check covers it"
        return record

    def epsilon_fn(sigma: float, q: float, steps: int, at: float) -> float:
        return accounting.epsilon([accounting.GaussianPhase(sigma, q, steps)], at, accountant)

    try:
        check_accountant(epsilon_fn, grid=QUICK_GRID, sweeps=False, strict=False)  # over-reports are allowed
    except CheckFailed as failed:
        raise Refused(
            "verification", f"the registered accountant {accountant!r} fails check_accountant's grid: {failed}"
        ) from None
    record["grid"] = "passed check_accountant's quick grid"
    return record
