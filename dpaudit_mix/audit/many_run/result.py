"""What an audit finds, typed: one :class:`SettingResult` (an :class:`.scores.AuditResult` of one
canary, threat and noise setting) per setting, and the :class:`AuditSummary` over them.
``to_dict()`` is audit.json, key for key."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .scores import AuditResult


@dataclass(frozen=True)
class SettingResult(AuditResult):
    """One attack on one setting of an audit: which canary, threat model and noise it ran."""

    canary: str
    threat: str
    noise: bool  # False: the σ = 0 control

    @classmethod
    def of(cls, result: AuditResult, canary: str, threat: str, noise: bool) -> SettingResult:
        return cls(
            **{f.name: getattr(result, f.name) for f in fields(AuditResult)}, canary=canary, threat=threat, noise=noise
        )

    @property
    def name(self) -> str:
        return f"{self.canary}/{self.threat}"

    @property
    def exceeds_claim(self) -> bool:
        return self.violation

    def to_dict(self) -> dict[str, Any]:
        return {"canary": self.canary, "threat": self.threat, "noise": self.noise, **super().to_dict()}


@dataclass(frozen=True)
class AuditSummary:
    """The audit's verdict and every setting's result (audit.json)."""

    claimed_epsilon: float
    delta: float
    violation: bool  # a private setting exceeds the claim
    inconclusive: bool  # a σ = 0 control stays within the claim: the audit cannot see leakage
    blind_controls: tuple[str, ...]
    results: tuple[SettingResult, ...]
    mechanism: str  # what was audited (an audit spec's ``mechanism``)
    noise_multiplier: float
    calibrated_noise_multiplier: float
    problem: dict[str, Any]
    canaries: dict[str, Any]
    confidence: float  # the audit's verdict holds at this level
    confidence_per_result: float  # each result's level: the α shared over the private results
    threshold_strategy: str
    claimed_tradeoff: dict[str, Any]
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return summary_json(self)


def summary_json(summary: Any) -> dict[str, Any]:
    """An audit summary (any frozen dataclass of this shape) as audit.json: its fields in order,
    tuples as lists, ``results`` as each result's ``to_dict()``."""
    found: dict[str, Any] = {}
    for f in fields(summary):
        value = getattr(summary, f.name)
        if f.name == "results":
            value = [r.to_dict() for r in value]
        found[f.name] = list(value) if isinstance(value, tuple) else value
    return found
