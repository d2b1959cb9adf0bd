"""The λ release's white-box audit: of exactly the configuration released, and what the manifest
records of it (the verdicts, the size and power it was held to, and every setting check-release
ties to the claim)."""

from __future__ import annotations

from typing import Any

from .. import problem as problem_io
from ..audit.many_run.result import AuditSummary
from ..audit.spec import AuditSpec
from ..data import registry
from ..learner import learner_settings
from ..problem import Problem
from .audit_size import AuditSize
from .spec import ReleaseSpec


def audit_spec(spec: ReleaseSpec, prob: Problem, inputs: dict[str, str], runs: int) -> AuditSpec:
    """The white-box audit of exactly the configuration released: the same problem bytes, all of
    them (ρ = 1), the same σ, q, T, C and learner, the spec's canaries, ``runs`` runs each."""
    return AuditSpec(
        problem=spec.problem if spec.problem in registry.PROBLEMS else inputs["problem"],
        task=prob.task or spec.task,
        epsilon=spec.epsilon,
        delta=spec.delta,
        rho=1.0,
        **learner_settings(spec),
        canaries=spec.audit_canaries,
        natural_policy=spec.natural_policy,
        threats=("white_box",),
        controls=False,
        runs=runs,
        seed=spec.seed,
        confidence=spec.confidence,
        threshold=spec.threshold,
        chunk_size=spec.chunk_size,
    )


#: what the manifest keeps of each audit result: its bounds (the Gaussian reading beside them only
#: where it is one; else under ``diagnostics``, as audit.json has it).
RESULT_KEYS = (
    "canary",
    "threat",
    "runs",
    "epsilon_lower_bound",
    "mu_lower_bound",
    "epsilon_lower_bound_gdp",
    "profile_violation",
    "epsilon_violation",
    "verdict",
    "epsilon_lower_bound_max",
    "diagnostics",
)


def _result_record(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in RESULT_KEYS if k in result}


def audit_record(audit: AuditSummary, spec: ReleaseSpec, prob: Problem, sized: AuditSize) -> dict[str, Any]:
    """The manifest's audit section: the verdicts, its size and power, and every setting
    check-release ties to the claim."""
    return {
        "runs": sized.size,
        **sized.record(),
        "violation": audit.violation,
        "results": [_result_record(r.to_dict()) for r in audit.results],
        "confidence": audit.confidence,
        "confidence_per_result": audit.confidence_per_result,
        "threshold_strategy": audit.threshold_strategy,
        "claimed_tradeoff": audit.claimed_tradeoff,
        "noise_multiplier": audit.noise_multiplier,
        "sample_rate": spec.sample_rate,
        "steps": spec.steps,
        "clip": spec.clip,
        "data_sha256": problem_io.data_sha256(prob),
        "problem": audit.problem,
    }
