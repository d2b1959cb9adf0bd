"""An audit spec's ``detect``, resolved into its runs (or one-run canaries) once its claim is known.

``detect = c`` in an audit spec replaces ``runs`` (one-run: ``one_run_canaries``): the audit is
as large as it must be to catch σ/c with 90 %, planned by :func:`.plan.plan_audit` from the
claim its mechanism calibrated (the phases are known only then), at each result's confidence
(the audit's α shared over its private results, as the engines share it). A claim no size on
the planner's ladder reaches is refused with one line, before any run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .. import accounting
from ..base.errors import require
from .plan import plan_audit
from .spec import AuditSpec
from .verdict import result_confidence


def sized(
    spec: AuditSpec, phases: Sequence[accounting.GaussianPhase], private_results: int, accountant: str
) -> AuditSpec:
    """``spec`` with the runs (or canaries) its ``detect`` asks for, for the claim ``accountant``
    calibrated; ``spec`` itself without one."""
    if spec.detect is None:
        return spec
    plan = plan_audit(
        spec.epsilon,
        spec.delta,
        phases,
        detect=spec.detect,
        one_run=spec.one_run,
        confidence=result_confidence(spec.confidence, private_results),
        threshold=spec.threshold,
        accountant=accountant,
    )
    require(plan.met, f"detect = {spec.detect:g}: {plan.line()} for this claim; give a larger detect, or runs")
    if spec.one_run:
        assert plan.canaries is not None
        return replace(spec, one_run_canaries=plan.canaries)
    assert plan.runs is not None
    return replace(spec, runs=2 * plan.runs)
