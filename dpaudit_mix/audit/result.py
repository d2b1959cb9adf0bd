"""What an audit finds, typed: one :class:`SettingResult` per (canary, threat, noise) and the
:class:`AuditSummary` over them. ``to_dict()`` is audit.json, key for key."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class SettingResult:
    """One attack on one setting: its bounds, the test behind them, and its diagnostics."""

    canary: str
    threat: str
    noise: bool  # False: the σ = 0 control
    runs: int
    epsilon_lower_bound: float  # strict (ε, δ) bound at the strict threshold
    fpr_upper: float
    fnr_upper: float
    mu_lower_bound: float
    epsilon_lower_bound_gdp: float
    claimed_mu: float | None  # the claim as μ-GDP (full batch only)
    profile_violation: bool  # a CP point lies below the claimed trade-off curve
    gdp_fpr_upper: float
    gdp_fnr_upper: float
    threshold: float
    gdp_threshold: float
    candidate_thresholds: int
    counts: dict[str, int]  # fp, fn, negatives, positives at the strict threshold
    auroc: float
    auroc_ci: tuple[float, float]
    tpr_at_fpr: dict[str, float]
    exceeds_claim: bool  # ε_LB above the claimed ε, or a profile violation

    @property
    def name(self) -> str:
        return f"{self.canary}/{self.threat}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.claimed_mu is None:
            del data["claimed_mu"]
        data["auroc_ci"] = list(self.auroc_ci)
        return data


@dataclass(frozen=True)
class AuditSummary:
    """The audit's verdict and every setting's result (audit.json)."""

    claimed_epsilon: float
    delta: float
    violation: bool  # a private setting exceeds the claim
    inconclusive: bool  # a σ = 0 control stays within the claim: the audit cannot see leakage
    blind_controls: tuple[str, ...]
    results: tuple[SettingResult, ...]
    noise_multiplier: float
    calibrated_noise_multiplier: float
    problem: dict[str, Any]
    canaries: dict[str, Any]
    confidence: float
    threshold_strategy: str
    claimed_tradeoff: dict[str, Any]
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "claimed_epsilon": self.claimed_epsilon,
            "delta": self.delta,
            "violation": self.violation,
            "inconclusive": self.inconclusive,
            "blind_controls": list(self.blind_controls),
            "results": [r.to_dict() for r in self.results],
            "noise_multiplier": self.noise_multiplier,
            "calibrated_noise_multiplier": self.calibrated_noise_multiplier,
            "problem": self.problem,
            "canaries": self.canaries,
            "confidence": self.confidence,
            "threshold_strategy": self.threshold_strategy,
            "claimed_tradeoff": self.claimed_tradeoff,
            "seed": self.seed,
        }
