"""Planning an audit before any run is spent: the smallest size, on a fixed ladder, whose power
reaches a target leak (``detect = 2``: σ/2 flagged in 90 % of audits), from the claim alone.

The answer is the power that the audit itself will report (:mod:`.power` for many runs,
:mod:`.one_run_power` for one run), so a planned audit states, when it has run, the power it was
planned for. The cost is counted in what a user pays: training runs (a many-run audit trains
every canary-in and canary-out run; a one-run audit trains once, with its canaries).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import accounting
from ..base.errors import is_real, require
from .claim import Claim, checked_claim, claim_of, claimed_curve
from .one_run.power import one_run_power, one_run_power_claim, one_run_unsimulated
from .power import LEAKS, Power, power_claim, power_of, unsimulated

#: the sizes tried, smallest first: runs a side (many-run), canaries (one-run).
RUN_LADDER = (50, 100, 200, 500, 1000, 2000, 5000)
CANARY_LADDER = (1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000)


@dataclass(frozen=True)
class Plan:
    """The size that meets ``detect`` (None: no size on the ladder does) and its power.

    Attributes:
      one_run: a one-run audit (canaries) rather than a many-run one (runs).
      detect: c, the leak σ/c planned for.
      runs: the runs a side that meet it (many-run), else None.
      canaries: the canaries that meet it (one-run), else None.
      training_runs: the trainings it takes (2 × runs, or 1).
      power: the power at that size (or at the largest tried).
      tried: each size tried, with the leak it detects.
      unsimulated: why no power is simulated for this claim, where none is.
    """

    one_run: bool
    detect: float
    runs: int | None  # a side, many-run (None for one-run or when unmet)
    canaries: int | None  # one-run (None for many-run or when unmet)
    training_runs: int | None  # what the audit costs
    power: Power | None  # the power at the planned size (or at the ladder's last, when unmet)
    tried: tuple[tuple[int, float | None], ...]  # (size, detects) up the ladder
    #: why the ladder stopped where no power is simulated (:func:`unsimulated_at`; None: it ran up)
    unsimulated: str | None = None

    @property
    def met(self) -> bool:
        return self.training_runs is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "one_run": self.one_run,
            "detect": self.detect,
            "met": self.met,
            "runs": self.runs,
            "canaries": self.canaries,
            "training_runs": self.training_runs,
            "power": None if self.power is None else self.power.to_dict(),
            "tried": [list(t) for t in self.tried],
            "unsimulated": self.unsimulated,
        }

    def line(self) -> str:
        unit = "canaries" if self.one_run else "runs a side"
        if not self.met:
            head = f"no audit up to {self.tried[-1][0]:,} {unit}" if self.tried else "no audit"
            why = "" if self.unsimulated is None else f" ({'beyond: ' if self.tried else ''}{self.unsimulated})"
            return f"{head} catches σ/{self.detect:g} with 90%{why}"
        size = self.canaries if self.one_run else self.runs
        assert self.power is not None
        return (
            f"{size} {unit} ({self.training_runs} training run{'s' if self.training_runs != 1 else ''}): "
            f"{self.power.line(f'{size} {unit}')}"
        )


def power_at(
    claim: Claim, size: int, *, one_run: bool, confidence: float = 0.95, threshold: str = "bonferroni"
) -> Power | None:
    """The power an audit of ``claim`` reports at ``size`` (runs a side, or canaries), from the
    claim alone (None where its score law is not simulated at that size): what a planned audit
    and a gate that holds an audit to a ``detect`` both read."""
    epsilon, delta, phases = claim.epsilon, claim.delta, claim.phases
    if one_run:
        return one_run_power(one_run_power_claim(epsilon, delta, phases=phases, canaries=size, confidence=confidence))
    claimed = checked_claim(
        epsilon, delta, phases=phases, confidence=confidence, threshold=threshold, accountant=claim.accountant
    )
    return power_of(
        power_claim(
            epsilon,
            delta,
            phases=phases,
            claimed=claimed,
            stated=claimed_curve(phases, None, delta),
            runs_in=size,
            runs_out=size,
            confidence=confidence,
            threshold=threshold,
        )
    )


def unsimulated_at(
    phases: Sequence[accounting.GaussianPhase] | None, size: int, *, one_run: bool, threshold: str = "bonferroni"
) -> str | None:
    """Why :func:`power_at` gives no power at ``size`` (runs a side, or canaries); None where it does."""
    phases = tuple(phases or ())
    return one_run_unsimulated(phases) if one_run else unsimulated(phases, 2 * size, threshold)


def catches(power: Power | None, detect: float) -> bool:
    """Whether an audit of this power catches σ/``detect`` with 90 % (a leak it catches at a
    smaller c it catches here too: the flag rate rises with c)."""
    return power is not None and power.detects is not None and power.detects <= detect


def check_detect(detect: object) -> float:
    """``detect`` as a target leak c (σ/c): a real number on the power grid's range."""
    require(
        is_real(detect) and LEAKS[0] <= float(detect) <= LEAKS[-1],  # type: ignore[arg-type]
        f"detect must be in [{LEAKS[0]}, {LEAKS[-1]}], got {detect!r}",
    )
    return float(detect)  # type: ignore[arg-type]


def plan_audit(
    epsilon: float | None = None,
    delta: float | None = None,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    *,
    claim: Claim | None = None,
    detect: float = 2.0,
    one_run: bool = False,
    confidence: float = 0.95,
    threshold: str = "bonferroni",
    accountant: str | None = None,
) -> Plan:
    """The smallest audit of the claim (ε, δ[, phases], calibrated by ``accountant``) that
    catches σ/``detect`` in ≥ 90 % of audits (95 % confidence).

    Args:
      epsilon: the claimed ε (with ``delta``, ``phases``, ``accountant``: a Claim).
      delta: the claimed δ.
      phases: the Gaussian phases the mechanism runs.
      claim: the claim planned for (:class:`~.claim.Claim`), instead of the loose fields.
      detect: c, the leak σ/c the audit must catch (> 1).
      one_run: size a one-run audit (canaries) instead of a many-run one (runs).
      confidence: the level of the audit's lower bound.
      threshold: the many-run threshold strategy.
      accountant: the accountant that calibrated σ (default PLD).

    Returns:
      The :class:`Plan`: the size that catches the leak, or the largest tried and why not.

    Raises:
      InputError: a claim that is not one thing, or a bad setting.
    """
    detect = check_detect(detect)
    claim = claim_of(claim, epsilon=epsilon, delta=delta, phases=phases, accountant=accountant)
    checked_claim(
        claim.epsilon,
        claim.delta,
        phases=claim.phases,
        confidence=confidence,
        threshold=threshold,
        accountant=claim.accountant,
    )
    tried: list[tuple[int, float | None]] = []
    power: Power | None = None
    for size in CANARY_LADDER if one_run else RUN_LADDER:
        power = power_at(claim, size, one_run=one_run, confidence=confidence, threshold=threshold)
        if power is None:  # this claim's score law is not simulated at this size (nor above it)
            why = unsimulated_at(claim.phases, size, one_run=one_run, threshold=threshold)
            return Plan(one_run, detect, None, None, None, None, tuple(tried), why)
        tried.append((size, power.detects))
        if catches(power, detect):
            return Plan(
                one_run,
                detect,
                None if one_run else size,
                size if one_run else None,
                1 if one_run else 2 * size,
                power,
                tuple(tried),
            )
    return Plan(one_run, detect, None, None, None, power, tuple(tried))
