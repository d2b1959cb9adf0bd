"""The library accountants' adapters: opacus' ``rdp`` and ``prv`` and dp_accounting's ``pld``
(and its RDP and replace-one PLD as cross-checks), each asked in a :func:`~..resources.bounded`
child; a request so leaky that a discretised accountant would not finish is refused first.

dp_accounting and opacus (which loads torch) are imported where they are used: together they take
seconds, and commands like `bound` never need them."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base.errors import InputError
from ..base.resources import bounded, bounded_all
from .gdp import gdp_epsilon_of_mu
from .phases import MAX_EPSILON, GaussianPhase, check_delta, check_phases, describe, pld_event

if TYPE_CHECKING:
    import dp_accounting


def pld_accountant(
    phases: Sequence[GaussianPhase], interval: float | None = None, replace_one: bool = False
) -> dp_accounting.pld.PLDAccountant:
    """dp_accounting's PLD of ``phases``; ``interval`` is its value discretisation (coarser is
    faster and stays pessimistic), its default when None; ``replace_one`` accounts under
    replace-one neighbouring (a Gaussian's sensitivity is then 2C), not add/remove."""
    import dp_accounting

    options: dict[str, Any] = {} if interval is None else {"value_discretization_interval": interval}
    if replace_one:
        options["neighboring_relation"] = dp_accounting.NeighboringRelation.REPLACE_ONE
    pld = dp_accounting.pld.PLDAccountant(**options)
    pld.compose(dp_accounting.ComposedDpEvent([pld_event(p) for p in phases]))
    return pld


@dataclass(frozen=True)
class LibraryAccountant:
    """opacus' ``rdp`` or ``prv``, or dp_accounting's ``pld``, each asked in a
    :func:`~.resources.bounded` child (a degenerate request cannot take the machine's memory)."""

    name: str

    def epsilon(self, phases: Sequence[GaussianPhase], delta: float) -> float:
        return library_epsilons([(tuple(phases), delta, self.name)])[0]


def library_epsilons(requests: Sequence[tuple[tuple[GaussianPhase, ...], float, str]]) -> list[float]:
    """Library accountants' answers to checked requests, each in a guarded child, side by side."""
    import dp_accounting  # noqa: F401  (loaded here, so each bounded child finds it loaded)

    if any(accountant in ("rdp", "prv") for _, _, accountant in requests):
        import opacus.accountants  # noqa: F401
    values = bounded_all(
        library_epsilon,
        requests,
        what=[describe(accountant, phases, delta) for phases, delta, accountant in requests],
        errors=(DegenerateRequest,),
    )
    return [float(v) for v in values]


#: a request whose RDP ε (an upper bound, within a small factor of the truth for Gaussians) is
#: above this is refused by the PLD and PRV accountants: its noise is far too small to mean
#: anything, and their discretised loss distributions grow without bound (σ = 0.01 asked 26 GiB).
DEGENERATE_EPSILON = 10 * MAX_EPSILON
#: the δ at which a privacy profile's request is checked for it.
DEGENERATE_DELTA = 1e-5


class DegenerateRequest(InputError):
    """A mechanism so leaky that the PLD and PRV accountants would not finish (ε far above 100)."""


def refuse_degenerate(phases: Sequence[GaussianPhase], delta: float, accountant: str) -> None:
    """Raise :class:`DegenerateRequest` when dp_accounting's RDP (fast, small) gives ε above
    DEGENERATE_EPSILON: only then would a discretised accountant's memory and time explode. The
    full-batch GDP ε (analytic) screens first: it bounds every q's ε from above."""
    full_batch_mu = float(np.sqrt(sum(p.steps / p.noise_multiplier**2 for p in phases)))
    if gdp_epsilon_of_mu(full_batch_mu, delta) <= DEGENERATE_EPSILON:
        return  # exact for full batch, and Poisson sampling only lowers ε: no RDP needed
    rough = google_rdp(phases, delta)
    if rough > DEGENERATE_EPSILON:
        raise DegenerateRequest(
            f"refused: {describe(accountant, phases, delta)}: its RDP epsilon is {rough:.4g}, above "
            f"{DEGENERATE_EPSILON:g} (the noise is far too small to mean anything, and the accountant's memory "
            "would grow without bound)"
        )


def library_epsilon(phases: Sequence[GaussianPhase], delta: float, accountant: str) -> float:
    if accountant != "rdp":
        refuse_degenerate(phases, delta, accountant)
    if accountant == "pld":
        return float(pld_accountant(phases).get_epsilon(delta))
    from opacus.accountants import PRVAccountant, RDPAccountant  # loads torch: only when asked for

    opacus_acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    opacus_acc.history = [(p.noise_multiplier, p.sample_rate, p.steps) for p in phases]
    # opacus' PRV takes log(1 − q) = −inf at q = 1 (harmless), and RDP warns when the best order
    # is the largest it tries (a looser, still valid bound): neither is for our users' eyes.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", UserWarning)
        return float(opacus_acc.get_epsilon(delta))


@lru_cache(maxsize=1024)
def replace_one_epsilon(phases: tuple[GaussianPhase, ...], delta: float) -> float:
    return bounded(
        _replace_one_pld, phases, delta, what=describe("pld (replace-one)", phases, delta), errors=(DegenerateRequest,)
    )


def _replace_one_pld(phases: Sequence[GaussianPhase], delta: float) -> float:
    refuse_degenerate(phases, delta, "pld")
    return float(pld_accountant(phases, replace_one=True).get_epsilon(delta))


def google_rdp_epsilon(phases: Sequence[GaussianPhase], delta: float) -> float:
    """ε from dp_accounting's RDP accountant: a second, independent RDP implementation to check
    opacus' against (it logs a warning per order it drops; those are silenced)."""
    check_delta(delta)
    check_phases(phases)
    return bounded(google_rdp, phases, delta, what=describe("dp_accounting rdp", phases, delta))


def google_rdp(phases: Sequence[GaussianPhase], delta: float) -> float:
    import dp_accounting
    from absl import logging as absl_logging

    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        accountant = dp_accounting.rdp.RdpAccountant()
        accountant.compose(dp_accounting.ComposedDpEvent([pld_event(p) for p in phases]))
        return float(accountant.get_epsilon(delta))
    finally:
        absl_logging.set_verbosity(verbosity)
