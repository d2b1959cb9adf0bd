"""What both audit engines' summaries say, assembled once: the claim, the verdict over the private
settings (a violation) and over the σ = 0 controls (blind: the audit cannot see leakage), the
mechanism and its σ, the data and canaries, the levels and the seed. The many-run
(:class:`.result.AuditSummary`) and the one-run (:class:`.run_once.OneRunSummary`) summaries
differ only in the fields that are theirs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from .mechanisms.base import RunPlan
from .spec import AuditSpec


class OfSetting(Protocol):
    """A result of one setting (its canary kind, with noise or as the σ = 0 control)."""

    @property
    def name(self) -> str: ...
    @property
    def noise(self) -> bool: ...


R = TypeVar("R", bound=OfSetting)

#: the fields :func:`summary_fields` fills, in audit.json's order.
SUMMARY_FIELDS = (
    "claimed_epsilon",
    "delta",
    "violation",
    "inconclusive",
    "blind_controls",
    "results",
    "mechanism",
    "noise_multiplier",
    "calibrated_noise_multiplier",
    "problem",
    "canaries",
    "confidence",
    "confidence_per_result",
    "seed",
)


def result_confidence(confidence: float, verdicts: int) -> float:
    """Each result's confidence when an audit's verdict is the OR of ``verdicts`` results: α
    shared equally (Bonferroni), so that the audit's verdict, not each result, holds at
    ``confidence``. (Per result at 95 %, an OR of 4 held at about 81 %.)"""
    return 1 - (1 - confidence) / max(1, verdicts)


def summary_fields(
    spec: AuditSpec, plan: RunPlan[Any], results: Sequence[R], exceeds: Callable[[R], bool], per_result: float
) -> dict[str, Any]:
    """The shared fields of a summary of ``results``, each of which ``exceeds`` its claim or not:
    a private one that does is a violation; a control that does not is blind."""
    blind = tuple(r.name for r in results if not r.noise and not exceeds(r))
    values = {
        "claimed_epsilon": spec.epsilon,
        "delta": spec.delta,
        "violation": any(r.noise and exceeds(r) for r in results),
        "inconclusive": bool(blind),
        "blind_controls": blind,
        "results": tuple(results),
        "mechanism": spec.mechanism,
        "noise_multiplier": plan.noise_multiplier,
        "calibrated_noise_multiplier": plan.calibrated_noise_multiplier,
        "problem": plan.problem,
        "canaries": plan.canaries,
        "confidence": spec.confidence,
        "confidence_per_result": per_result,
        "seed": spec.seed,
    }
    return values
