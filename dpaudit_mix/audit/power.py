"""The power of a many-run audit, from the claim alone: what an exactly-claimed mechanism shows at
this size, and the smallest leak the audit catches.

A silent audit is evidence only in proportion to what it could have seen. So every many-run
result carries ``power``, computed by simulating the claimed mechanism's white-box score law and
running the same attack on the same numbers of canary-in and canary-out runs (for the Gaussian
law and the package's bonferroni, drawing the attack's counts from their exact law instead of
the scores: :func:`gaussian_counts`, so a 2 × 10⁸-run audit's power costs what a small one's does):

- the law: without phases, the μ-GDP mechanism of (ε, δ) (in ~ N(μ, 1), out ~ N(0, 1), μ the
  claim's: :func:`..accounting.gdp_mu_of_epsilon`), or at δ = 0 the Laplace mechanism of ε (in ~
  1 + Lap(1/ε), out ~ Lap(1/ε): exactly ε-DP, a pure claim's own law, where a Gaussian one would
  put its ε_LB far below what a correct pure mechanism shows); with full-batch phases, the same with μ =
  √(Σ T/σ²) (Dong, Roth & Su 2019, Cor. 3.3, the composition of Gaussian mechanisms); with one
  Poisson-subsampled phase, the Dirac canary's log-likelihood-ratio score (:mod:`.dirac`), the
  Neyman–Pearson test of the claimed (σ, q, T), drawn step by step for small audits and from its
  law (:func:`.dirac.score_law`) past :data:`MAX_DIRAC_DRAWS`. Several subsampled phases: no
  power is given.
- the verdict: as :func:`.scores.analyse` gives it, the strict ε_LB above ε, or, where a curve
  is stated, a CP point below it.
- ``tight_lower_bound``: the median strict ε_LB over :data:`SIMULATIONS` audits of the exact
  mechanism, with its 10–90 % band: what a correct mechanism shows at this size.
- ``detects``: the smallest noise factor c on :data:`LEAKS` such that the mechanism run with σ/c
  (a μ-GDP claim: μ·c; a pure one: the Laplace scale over c) is flagged in at least
  :data:`DETECTS_WITH` of audits with 95 % confidence (the one-sided Clopper–Pearson lower bound
  of its flag rate over :data:`DETECT_SIMULATIONS` simulated audits: a promise the planner and
  the gate size audits by holds as stated, not on the luck of one batch of simulations); None
  beyond the grid's last, 10. Found by a binary search over the grid (the flag rate rises with c).

Each answer is cached by the claim and the sizes; the draws come from the stream
``audit-power``, named by the claim, so the same claim at the same size has the same power.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from hashlib import sha256
from typing import Any

import numpy as np

from .. import accounting
from ..base.randomness import stream
from .attack import (
    RANKS_PER_SIDE,
    THRESHOLDS,
    AttackResult,
    attack,
    attack_result,
    bonferroni,
    bonferroni_tests,
    rank_grid,
)
from .dirac import simulated_scores
from .profile import TradeOff

#: simulated audits per answer: the median's band and the flag rates rest on this many.
SIMULATIONS = 50
#: the noise factors c tried for ``detects`` (σ/c), and the flag rate that counts as caught.
LEAKS = (1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
DETECTS_WITH = 0.9
#: the audits behind each leak's flag rate, the confidence of its lower bound, and the audits a batch.
DETECT_SIMULATIONS, DETECT_CONFIDENCE, DETECT_BATCH = 64, 0.95, 16
#: the most scores one simulated Dirac audit draws step by step (runs × steps): beyond, from their law.
MAX_DIRAC_DRAWS = 50_000
#: the most runs an audit's power simulates score by score (every rule but the Gaussian law's
#: bonferroni, whose counts are drawn from their law at any size): 50 audits at ~6 leaks of
#: 10⁶ runs take ~25 s, and of 2 × 10⁷ runs ten minutes.
MAX_SIMULATED_RUNS = 1_000_000


@dataclass(frozen=True)
class Power:
    """What an audit of this size could show: the exact mechanism's ε_LB and the leak it catches."""

    tight_lower_bound: float  # the median strict ε_LB of an exactly-claimed mechanism
    band: tuple[float, float]  # its 10 % and 90 % quantiles
    detects: float | None  # the smallest c with σ/c flagged in ≥ DETECTS_WITH of audits (95 %); None: beyond 10
    method: str  # how it was computed
    #: at ``detects``: the simulated audits flagged, of how many (None where nothing is caught)
    flagged: tuple[int, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tight_lower_bound": self.tight_lower_bound,
            "tight_lower_bound_band": list(self.band),
            "detects": self.detects,
            "detects_flagged": None if self.flagged is None else list(self.flagged),
            "method": self.method,
        }

    def line(self, size: str) -> str:
        """What an exactly-claimed mechanism shows at ``size`` ("2000 runs", "10000 canaries")."""
        caught = "no leak up to σ/10" if self.detects is None else f"σ/{self.detects:g}"
        low, high = self.band
        return (
            f"an exactly-claimed mechanism gives ε_LB {self.tight_lower_bound:.3f} ({low:.3f}–{high:.3f}) at "
            f"{size}; this audit catches {caught} with {DETECTS_WITH:.0%} ({DETECT_CONFIDENCE:.0%} confidence)"
        )


def caught(power: Power | None, unsimulated: str | None) -> str:
    """What an audit of ``power`` catches, in the words a one-line summary ends with (``unsimulated``:
    why no power was simulated, where none was)."""
    if power is None:
        return f"no power simulated ({unsimulated})"
    if power.detects is None:
        return "catches no leak up to σ/10"
    return f"catches σ/{power.detects:g} in {DETECTS_WITH:.0%} of audits ({DETECT_CONFIDENCE:.0%} confidence)"


def power_claim(
    epsilon: float,
    delta: float,
    *,
    phases: Sequence[accounting.GaussianPhase] | None,
    claimed: TradeOff,
    stated: str,
    runs_in: int,
    runs_out: int,
    confidence: float,
    threshold: str,
) -> PowerClaim | None:
    """What the power of an audit of the claim at this size rests on; None where the claimed
    mechanism's score law is not simulated (:func:`unsimulated` says why)."""
    phases = tuple(phases or ())
    if unsimulated(phases, runs_in + runs_out, threshold) is not None:
        return None
    return PowerClaim(epsilon, delta, phases, claimed, stated, runs_in, runs_out, confidence, threshold)


def unsimulated(phases: Sequence[accounting.GaussianPhase], runs: int, threshold: str) -> str | None:
    """Why an audit of ``phases`` from ``runs`` runs (both sides) reports no power, in the words a
    report prints beside its silence (a power it does not have is no evidence it could have
    caught a leak); None where its power is simulated."""
    found = subsampled_unsimulated(phases)
    # the Gaussian and Laplace laws' bonferroni draws its counts from their law, at any size
    by_counts = not any(p.sample_rate < 1 for p in phases) and THRESHOLDS.get(threshold) is bonferroni
    if found is None and not by_counts and runs > MAX_SIMULATED_RUNS:
        return (
            f"{runs:,} runs are more than the {MAX_SIMULATED_RUNS:,} the {threshold} threshold simulates score by score"
        )
    return found


def subsampled_unsimulated(phases: Sequence[accounting.GaussianPhase]) -> str | None:
    """Why a subsampled claim's Dirac score law (:mod:`.dirac`) is not simulated: several phases
    (one subsampled phase is simulated at any size: its law, not its steps, past a few draws)."""
    if any(p.sample_rate < 1 for p in phases) and len(phases) > 1:
        return "the claim has several phases, one of them subsampled, and their score law is not simulated"
    return None


def power_of(claim: PowerClaim | None) -> Power | None:
    """The power of an audit of ``claim`` (computed once per claim, when first asked)."""
    return None if claim is None else _power(claim)


@dataclass(frozen=True)
class PowerClaim:
    """What the power of an audit depends on: the claim, its stated curve, the sizes, the level
    and the threshold strategy (the cache key, and what names the streams)."""

    epsilon: float
    delta: float
    phases: tuple[accounting.GaussianPhase, ...]
    claimed: Any  # a TradeOff: frozen, hashable
    stated: str
    runs_in: int
    runs_out: int
    confidence: float
    threshold: str


@lru_cache(maxsize=256)
def _power(audit: PowerClaim) -> Power:
    epsilon, runs_in = audit.epsilon, audit.runs_in
    law = _Law.of(audit)

    def flags(leak: float, audits: range) -> np.ndarray:
        found = [law.attacked(k, leak, audit) for k in audits]
        return np.array(
            [
                f.epsilon_lower_bound > epsilon or (audit.stated != "none" and f.profile_violation(audit.claimed))
                for f in found
            ]
        )

    exact = np.array([law.attacked(k, 1.0, audit).epsilon_lower_bound for k in range(SIMULATIONS)])
    return simulated_power(exact, flags, f"{law.name} at {runs_in} + {audit.runs_out} runs, the same attack")


def _misses_allowed() -> int:
    """The most unflagged audits of :data:`DETECT_SIMULATIONS` whose flag rate still has a one-sided
    :data:`DETECT_CONFIDENCE` Clopper–Pearson lower bound ≥ :data:`DETECTS_WITH`."""
    from statsmodels.stats.proportion import proportion_confint

    def lower(flagged: int) -> float:
        return float(proportion_confint(flagged, DETECT_SIMULATIONS, 2 * (1 - DETECT_CONFIDENCE), method="beta")[0])

    flagged = DETECT_SIMULATIONS
    while flagged > 0 and lower(flagged - 1) >= DETECTS_WITH:
        flagged -= 1
    return DETECT_SIMULATIONS - flagged


def simulated_power(exact: np.ndarray, flags: Callable[[float, range], np.ndarray], law: str) -> Power:
    """The power of simulated audits of ``law``: ``exact`` the exactly-claimed mechanism's ε_LB over
    :data:`SIMULATIONS` of them; ``detects`` the smallest c on LEAKS caught, by a binary search (the
    flag rate rises with c). A leak is caught where its flag rate is ≥ :data:`DETECTS_WITH` with
    :data:`DETECT_CONFIDENCE` (Clopper–Pearson over :data:`DETECT_SIMULATIONS` audits, from
    streams of their own: at most :func:`_misses_allowed` unflagged); its audits run in batches of
    :data:`DETECT_BATCH`, and one batch past that many misses ends the leak: the verdict the whole
    count would reach, at a fraction of the cost. None beyond the grid."""
    allowed = _misses_allowed()
    counted: dict[float, tuple[int, int]] = {}

    def caught(leak: float) -> bool:
        flagged = done = 0
        for start in range(0, DETECT_SIMULATIONS, DETECT_BATCH):
            found = flags(leak, range(start, min(start + DETECT_BATCH, DETECT_SIMULATIONS)))
            flagged, done = flagged + int(found.sum()), done + len(found)
            if done - flagged > allowed:
                break
        counted[leak] = (flagged, done)
        return done - flagged <= allowed

    low, high = 0, len(LEAKS)
    while low < high:
        middle = (low + high) // 2
        if caught(LEAKS[middle]):
            high = middle
        else:
            low = middle + 1
    detects = LEAKS[low] if low < len(LEAKS) else None
    rule = (
        f"detects: the smallest σ/c flagged in ≥ {DETECTS_WITH:.0%} of audits with {DETECT_CONFIDENCE:.0%} confidence "
        f"(one-sided Clopper–Pearson over {DETECT_SIMULATIONS} simulated audits: at most {allowed} unflagged)"
    )
    return Power(
        tight_lower_bound=float(np.median(exact)),
        band=(float(np.quantile(exact, 0.1)), float(np.quantile(exact, 0.9))),
        detects=detects,
        method=f"{len(exact)} simulated audits of {law} (ε_LB); {rule}",
        flagged=None if detects is None else counted[detects],
    )


@dataclass(frozen=True)
class _Law:
    """The claimed mechanism's white-box scores: Gaussian (μ-GDP), Laplace (pure ε: ``scale``
    1/ε) or the Dirac canary's."""

    name: str
    mu: float  # the Gaussian law's shift (0 for the Dirac law)
    phase: accounting.GaussianPhase | None  # the Dirac law's one subsampled phase
    runs_in: int
    runs_out: int
    key: str
    scale: float | None = None  # the Laplace law's scale b = 1/ε (in ~ 1 + Lap(b), out ~ Lap(b))

    @classmethod
    def of(cls, audit: PowerClaim) -> _Law:
        phases, runs_in, runs_out = audit.phases, audit.runs_in, audit.runs_out
        key = sha256(repr(audit).encode()).hexdigest()[:32]  # every field: one stream per claim, audit and leak
        if phases and phases[0].sample_rate < 1:
            p = phases[0]
            name = f"the Dirac canary of σ = {p.noise_multiplier:.4g}, q = {p.sample_rate:.4g}, T = {p.steps}"
            return cls(name, 0.0, p, runs_in, runs_out, key)
        if phases:
            mu = float(np.sqrt(sum(p.steps / p.noise_multiplier**2 for p in phases)))
            return cls(f"the full-batch Gaussian (μ = {mu:.4g})", mu, None, runs_in, runs_out, key)
        if audit.delta == 0:
            return cls(
                f"the Laplace mechanism of ε (scale 1/ε = {1 / audit.epsilon:.4g})",
                0.0,
                None,
                runs_in,
                runs_out,
                key,
                1 / audit.epsilon,
            )
        mu = accounting.gdp_mu_of_epsilon(audit.epsilon, audit.delta)
        return cls(f"the μ-GDP mechanism of ε (μ = {mu:.4g})", mu, None, runs_in, runs_out, key)

    def attacked(self, k: int, leak: float, audit: PowerClaim) -> AttackResult:
        """Audit ``k`` of the mechanism run with σ/``leak``, attacked as the audit would be, from a
        stream of its own: the package's bonferroni on the Gaussian or Laplace law from its
        counts' exact law (:func:`threshold_counts`, a few dozen draws at any size), else on
        simulated scores."""
        source = stream(0, "audit-power", claim=self.key, audit=k, leak=leak).numpy()
        if self.phase is None and THRESHOLDS.get(audit.threshold) is bonferroni:
            if self.scale is None:
                values, ranks, misses = gaussian_counts(self.mu * leak, self.runs_in, self.runs_out, source)
            else:
                values, ranks, misses = laplace_counts(self.scale / leak, self.runs_in, self.runs_out, source)
            counts = (np.nextafter(values, np.inf), ranks - 1, misses, self.runs_out, self.runs_in)
            chosen = bonferroni_tests(*counts, delta=audit.delta, confidence=audit.confidence)
            return attack_result("bonferroni", chosen, audit.delta)
        scores_in, scores_out = self._scores(leak, source)
        scores = np.concatenate([scores_in, scores_out])
        include = np.arange(len(scores)) < self.runs_in
        select = np.arange(len(scores)) % 2 == 0  # the split strategy's halves: fixed, not the labels
        return attack(scores, include, select, delta=audit.delta, confidence=audit.confidence, strategy=audit.threshold)

    def _scores(self, leak: float, source: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if self.scale is not None:
            b = self.scale / leak
            return 1 + source.laplace(0.0, b, self.runs_in), source.laplace(0.0, b, self.runs_out)
        if self.phase is None:
            return self.mu * leak + source.standard_normal(self.runs_in), source.standard_normal(self.runs_out)
        sigma, q, steps = self.phase.noise_multiplier, self.phase.sample_rate, self.phase.steps
        member = np.arange(self.runs_in + self.runs_out) < self.runs_in
        scores = simulated_scores(member, sigma, q, steps, leak, source, max_draws=MAX_DIRAC_DRAWS)
        return scores[: self.runs_in], scores[self.runs_in :]


def gaussian_counts(
    mu: float, runs_in: int, runs_out: int, source: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`threshold_counts` for in ~ N(μ, 1), out ~ N(0, 1)."""
    from scipy.special import ndtr, ndtri

    return threshold_counts(lambda tail: -ndtri(tail), lambda v: ndtr(mu - v), runs_in, runs_out, source)


def laplace_counts(
    scale: float, runs_in: int, runs_out: int, source: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`threshold_counts` for in ~ 1 + Lap(scale), out ~ Lap(scale)."""
    from scipy.stats import laplace

    return threshold_counts(
        lambda tail: laplace.isf(tail, scale=scale), lambda v: laplace.sf(v - 1, scale=scale), runs_in, runs_out, source
    )


def threshold_counts(
    out_isf: Callable[[np.ndarray], np.ndarray],
    in_sf: Callable[[np.ndarray], np.ndarray],
    runs_in: int,
    runs_out: int,
    source: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bonferroni candidates' counts for continuous in- and out-laws (``in_sf`` the in-law's
    survival function, ``out_isf`` the out-law's inverse survival function), drawn from their
    exact law instead of from 10⁸ scores: the out-scores at the rank grid (j = 1 the largest) as
    uniform order statistics, the j-th smallest upper-tail probability s_j = s_i + (1 − s_i)·
    Beta(j − i, n − j + 1) given the i-th (kept as tails, so the extreme ranks keep their
    precision), then the in-runs above each as sequential binomials of the in-law's tail mass
    between consecutive candidates. Returns the out-scores, their ranks j and the in-runs below each."""
    ranks = rank_grid(runs_out, RANKS_PER_SIDE)
    tails = np.empty(len(ranks))
    tail, done = 0.0, 0
    for at, j in enumerate(ranks):
        tail += (1 - tail) * source.beta(j - done, runs_out - j + 1)
        tails[at], done = tail, int(j)
    values = np.asarray(out_isf(tails))  # P(out > v_j) = s_j
    above_mass = np.asarray(in_sf(values))  # P(in > v_j), rising with j
    above = np.empty(len(ranks), dtype=np.int64)
    counted, left, mass = 0, runs_in, 0.0
    for at, m in enumerate(above_mass):
        step = int(source.binomial(left, min(1.0, max(0.0, (m - mass) / (1 - mass))))) if mass < 1 else 0
        counted, left, mass = counted + step, left - step, m
        above[at] = counted
    return values, ranks, runs_in - above
