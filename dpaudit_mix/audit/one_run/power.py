"""The power of a one-run audit, from the claim alone: what an exactly-claimed mechanism shows with
this many canaries, and the smallest leak the audit catches (the one-run twin of :mod:`.power`).

The claimed mechanism's white-box canary scores are simulated: without phases the μ-GDP
mechanism of (ε, δ) (members ~ N(μ, 1), non-members ~ N(0, 1)), or at δ = 0 the Laplace
mechanism of ε (members ~ 1 + Lap(1/ε), non-members ~ Lap(1/ε): a pure claim's own law); with
full-batch phases the same
with μ = √(ΣT/σ²); with one Poisson-subsampled phase the Dirac canary's log-likelihood ratio
(:mod:`.dirac`: step by step up to :data:`MAX_DIRAC_DRAWS` draws a run, from the score's
law beyond, so any T is simulated). Each simulated run draws membership (½ each) and scores, and the audit's own
guess sets and tests are run on it, all :data:`SIMULATIONS` runs at once:

- ``tight_lower_bound``: the median ε_LB (both methods, as :func:`.one_run.audit_one_run` gives
  it) of the exact mechanism, with its 10–90 % band;
- ``detects``: the smallest c on :data:`.power.LEAKS` such that the mechanism run with σ/c (a
  μ-GDP claim: μ·c) is flagged in at least :data:`.power.DETECTS_WITH` of the runs with 95 %
  confidence (:func:`.power.simulated_power`: Clopper–Pearson over 64 simulated runs), by the tests
  at the claim: the (ε, δ) curve by either method, or the claimed curve by f-DP (Steinke's test
  at each point of a subsampled profile is left out: the rate found is a lower bound on the
  audit's). None beyond c = 10.

Cached per claim and size; the draws come from the stream ``audit-power``, named by the claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from hashlib import sha256

import numpy as np

from ... import accounting
from ...base.randomness import stream
from ..dirac import simulated_scores
from ..power import Power, simulated_power, subsampled_unsimulated
from .fdp import PROFILE_FLOOR, PROFILE_GRID, Curves, GaussianCurves, LineCurves, rejects
from .guesses import EPSILON_MAX, GuessSets, largest_rejected, p_value

#: simulated runs per answer (one-run audits cost more than many-run ones: fewer runs).
SIMULATIONS = 20
#: the most scores one simulated Dirac run draws step by step (canaries × steps): beyond, from their law.
MAX_DIRAC_DRAWS = 2_000_000
#: the ε_LB grid of the f-DP search in the simulations (geometric).
GRID_POINTS, GRID_LOW = 64, 1e-3


@dataclass(frozen=True)
class OneRunPowerClaim:
    """What a one-run audit's power depends on: the claim, its phases, the canaries, the level."""

    epsilon: float
    delta: float
    phases: tuple[accounting.GaussianPhase, ...]
    canaries: int
    confidence: float


def one_run_power_claim(
    epsilon: float,
    delta: float,
    *,
    phases: Sequence[accounting.GaussianPhase] | None,
    canaries: int,
    confidence: float,
) -> OneRunPowerClaim | None:
    """The claim a one-run audit's power rests on; None where its score law is not simulated
    (:func:`one_run_unsimulated` says why)."""
    phases = tuple(phases or ())
    if one_run_unsimulated(phases) is not None:
        return None
    return OneRunPowerClaim(float(epsilon), float(delta), phases, int(canaries), float(confidence))


def one_run_unsimulated(phases: Sequence[accounting.GaussianPhase]) -> str | None:
    """Why a one-run audit of ``phases`` reports no power (the words its report prints); None
    where its power is simulated."""
    return subsampled_unsimulated(phases)


def one_run_power(claim: OneRunPowerClaim | None) -> Power | None:
    return None if claim is None else _power(claim)


@lru_cache(maxsize=128)
def _power(claim: OneRunPowerClaim) -> Power:
    law = _Law.of(claim)
    alpha = 1 - claim.confidence

    exact = law.sets(1.0, range(SIMULATIONS))
    per_set = alpha / len(exact[0])
    return simulated_power(
        _epsilon_lower_bounds(exact, claim.delta, per_set),
        lambda leak, audits: _flags(law, leak, audits, per_set),
        f"one-run audits of {law.name} with {claim.canaries} canaries, the same tests",
    )


def _stacked(runs: list[GuessSets]) -> tuple[int, np.ndarray, np.ndarray]:
    """Every run's guess sets in one column pair: the recursion runs once for all of them."""
    return runs[0].canaries, np.concatenate([r.guesses for r in runs]), np.concatenate([r.correct for r in runs])


def _epsilon_lower_bounds(runs: list[GuessSets], delta: float, alpha: float) -> np.ndarray:
    """Each run's ε_LB: the f-DP search on the grid, then Steinke's bisection on the sets whose
    p-value still rejects the f-DP bound (no other set can raise it: the p-value rises with ε)."""
    grid = np.geomspace(GRID_LOW, EPSILON_MAX, GRID_POINTS)
    found = rejects(LineCurves.approximate(grid, delta), *_stacked(runs), alpha).reshape(len(runs), -1, len(grid))
    fdp = np.where(found.any(axis=1), grid, 0.0).max(axis=1)
    bounds = []
    for sets, start in zip(runs, fdp, strict=True):
        steinke = [
            largest_rejected(sets.canaries, r, v, delta, alpha)
            for r, v in sets.pairs()
            if p_value(sets.canaries, r, v, float(start), delta) <= alpha
        ]
        bounds.append(max([float(start), *steinke]))
    return np.array(bounds)


def _flags(law: _Law, leak: float, audits: range, alpha: float) -> np.ndarray:
    """Whether each simulated audit of σ/``leak`` flags the claim."""
    runs = law.sets(leak, audits)
    claim = law.claim
    flags = np.zeros(len(runs), dtype=bool)
    for curve in (LineCurves.approximate(np.array([claim.epsilon]), claim.delta), law.curve):
        if curve is not None:
            flags |= rejects(curve, *_stacked(runs), alpha).reshape(len(runs), -1).any(axis=1)
    steinke = [  # only where f-DP has not flagged already: the verdict is either's
        not flagged and any(p_value(s.canaries, r, v, claim.epsilon, claim.delta) <= alpha for r, v in s.pairs())
        for s, flagged in zip(runs, flags, strict=True)
    ]
    return flags | np.array(steinke, dtype=bool)


@dataclass(frozen=True)
class _Law:
    """The claimed mechanism's one-run scores (Gaussian, Laplace or Dirac), and its claimed curve."""

    claim: OneRunPowerClaim
    name: str
    mu: float
    phase: accounting.GaussianPhase | None
    curve: Curves | None  # the claimed curve f-DP tests (None without phases)
    key: str
    scale: float | None = None  # the Laplace law's scale 1/ε (a pure claim: δ = 0)

    @classmethod
    def of(cls, claim: OneRunPowerClaim) -> _Law:
        key = sha256(repr(claim).encode()).hexdigest()[:32]
        phases = claim.phases
        if phases and phases[0].sample_rate < 1:
            p = phases[0]
            grid, deltas = accounting.privacy_profile_curve(phases, PROFILE_FLOOR, PROFILE_GRID)
            curve = LineCurves(np.array([grid]), np.array([deltas]))
            name = f"the Dirac canary of σ = {p.noise_multiplier:.4g}, q = {p.sample_rate:.4g}, T = {p.steps}"
            return cls(claim, name, 0.0, p, curve, key)
        if phases:
            mu = float(np.sqrt(sum(p.steps / p.noise_multiplier**2 for p in phases)))
            return cls(claim, f"the full-batch Gaussian (μ = {mu:.4g})", mu, None, GaussianCurves(np.array([mu])), key)
        if claim.delta == 0:
            name = f"the Laplace mechanism of ε (scale 1/ε = {1 / claim.epsilon:.4g})"
            return cls(claim, name, 0.0, None, None, key, 1 / claim.epsilon)
        mu = accounting.gdp_mu_of_epsilon(claim.epsilon, claim.delta)
        return cls(claim, f"the μ-GDP mechanism of ε (μ = {mu:.4g})", mu, None, None, key)

    def sets(self, leak: float, audits: range) -> list[GuessSets]:
        """The simulated runs' guess sets with σ/``leak``, each run from a stream of its own."""
        return [self._run(k, leak) for k in audits]

    def _run(self, k: int, leak: float) -> GuessSets:
        m = self.claim.canaries
        source = stream(0, "audit-power", claim=self.key, one_run=k, leak=leak).numpy()
        member = source.random(m) < 0.5
        if self.scale is not None:
            scores = member + source.laplace(0.0, self.scale / leak, m)
        elif self.phase is None:
            scores = self.mu * leak * member + source.standard_normal(m)
        else:
            sigma, q, steps = self.phase.noise_multiplier, self.phase.sample_rate, self.phase.steps
            scores = simulated_scores(member, sigma, q, steps, leak, source, max_draws=MAX_DIRAC_DRAWS)
        u = source.random(m)  # the audit's tie-break (scores of these laws tie with probability 0)
        return GuessSets.of(scores, member.astype(np.int64), u, one_sided=self.phase is not None)
