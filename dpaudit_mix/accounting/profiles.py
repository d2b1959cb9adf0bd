"""Privacy profiles δ(ε) of a composition of phases, from one PLD (pessimistic), and the
*optimistic* ε a lower bound may report: what the audit statistics compare an attack with."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ..base.errors import require
from ..base.resources import bounded
from .libraries import DEGENERATE_DELTA, DegenerateRequest, pld_accountant, refuse_degenerate
from .phases import GaussianPhase, check_phases, describe, request


def privacy_profile(phases: Sequence[GaussianPhase], epsilons: np.ndarray) -> np.ndarray:
    """δ(ε) of the composition of ``phases`` on a grid of ε, from dp_accounting's PLD accountant
    (pessimistic: never below the true δ, so a trade-off curve built from it is never above the
    true one)."""
    require(len(phases) >= 1, "nothing to account")
    check_phases(phases)
    grid = np.asarray(epsilons, dtype=float)

    def compute() -> np.ndarray:
        refuse_degenerate(phases, DEGENERATE_DELTA, "pld")
        return np.asarray(pld_accountant(phases).get_delta(grid), dtype=float)

    return bounded(
        compute,
        what=describe("pld", phases, DEGENERATE_DELTA) + " (its privacy profile)",
        errors=(DegenerateRequest,),
    )


#: :func:`optimistic_epsilon` rounds every step's privacy loss down to its grid, so its ε sits
#: at most T·Δ (about T·Δ/2: measured exactly 0.05 at T = 1000, Δ = 1e-4) below the true one; it
#: picks Δ so that this worst case is at most OPTIMISTIC_SHORTFALL of ε, within
#: [OPTIMISTIC_FINEST, OPTIMISTIC_COARSEST] (a few steps at a large ε need no fine grid).
OPTIMISTIC_SHORTFALL = 0.005
OPTIMISTIC_FINEST, OPTIMISTIC_COARSEST = 1e-5, 1e-2
#: the discretisation of the quick pessimistic estimate that sizes Δ (connect-the-dots at 1e-3 is
#: within 0.1% of the accountant's 1e-4 at T = 1000, ten times faster).
QUICK_INTERVAL = 1e-3


def optimistic_epsilon(phases: Sequence[GaussianPhase], delta: float) -> float:
    """ε at ``delta`` from dp_accounting's *optimistic* PLD of ``phases`` (never above the true ε):
    what a lower bound may report as the ε of a mechanism it has shown to be at least that leaky.

    Its grid Δ keeps the rounding shortfall (at most ΣT·Δ) under OPTIMISTIC_SHORTFALL · ε."""
    return optimistic_cache(*request(phases, delta))


@lru_cache(maxsize=1024)
def optimistic_cache(phases: tuple[GaussianPhase, ...], delta: float) -> float:
    return bounded(
        _optimistic_epsilon, phases, delta, what=describe("optimistic pld", phases, delta), errors=(DegenerateRequest,)
    )


def _optimistic_epsilon(phases: Sequence[GaussianPhase], delta: float) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pld

    refuse_degenerate(phases, delta, "optimistic pld")
    rough = float(pld_accountant(phases, QUICK_INTERVAL).get_epsilon(delta))
    steps = sum(p.steps for p in phases)
    interval = min(OPTIMISTIC_COARSEST, max(OPTIMISTIC_FINEST, OPTIMISTIC_SHORTFALL * rough / steps))
    losses = [
        pld.from_gaussian_mechanism(
            p.noise_multiplier,
            pessimistic_estimate=False,
            value_discretization_interval=interval,
            sampling_prob=p.sample_rate,
            use_connect_dots=False,  # it supports only the pessimistic estimate
        ).self_compose(p.steps)
        for p in phases
    ]
    composed = losses[0]
    for more in losses[1:]:
        composed = composed.compose(more)
    return float(composed.get_epsilon_for_delta(delta))


def privacy_profile_curve(
    phases: Sequence[GaussianPhase], delta_floor: float, points: int, interval: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A grid of ε from 0 to ε(``delta_floor``) and δ(ε) on it, from one PLD of ``phases``
    (pessimistic, like :func:`privacy_profile`; ``interval`` as in :func:`pld_accountant`)."""
    require(len(phases) >= 1, "nothing to account")
    check_phases(phases)
    return profile_curve(tuple(phases), float(delta_floor), points, interval)


@lru_cache(maxsize=1024)
def profile_curve(
    phases: tuple[GaussianPhase, ...], delta_floor: float, points: int, interval: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`privacy_profile_curve` once per request (read-only arrays: the cache shares them)."""

    def compute() -> tuple[np.ndarray, np.ndarray]:
        refuse_degenerate(phases, DEGENERATE_DELTA, "pld")
        pld = pld_accountant(phases, interval)
        grid = np.linspace(0.0, float(pld.get_epsilon(delta_floor)), points)
        return grid, np.asarray(pld.get_delta(grid), dtype=float)

    grid, deltas = bounded(
        compute, what=describe("pld", phases, delta_floor) + " (its privacy profile)", errors=(DegenerateRequest,)
    )
    grid.setflags(write=False)
    deltas.setflags(write=False)
    return grid, deltas
