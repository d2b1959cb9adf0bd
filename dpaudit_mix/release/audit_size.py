"""How large a release's audit is: the one its ``detect`` asks for, settled before anything is spent.

A release's audit is evidence only in proportion to what it could have caught. So a release spec
names the leak its audit must catch, ``detect = c`` (σ/c flagged with 90 %, default 2), and the
gate either plans the smallest audit that does (:func:`..audit.plan.plan_audit`: runs for λ,
canaries for a model) or, where the spec fixes the size, refuses an audit too small to meet it,
naming the size that would. Both read the power the audit itself reports when it has run
(:func:`..audit.plan.power_at`, from the claim alone), so the manifest's recorded power is the
one the gate held the audit to, and check-release recomputes it from the claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..audit.claim import Claim
from ..audit.plan import catches, check_detect, plan_audit, power_at, unsimulated_at
from ..audit.power import LEAKS, Power
from ..base.errors import InputError
from .refused import Refused


@dataclass(frozen=True)
class AuditSize:
    """The audit a release runs: its size (runs per canary, or canaries) and the power it has."""

    size: int
    power: Power
    detect: float
    planned: bool  # chosen by the plan (the spec gave no size)

    def record(self) -> dict[str, Any]:
        """What the manifest says of it."""
        return {"detect": self.detect, "planned": self.planned, "power": self.power.to_dict()}


def audit_size(
    claim: Claim,
    *,
    detect: float,
    size: int | None,
    one_run: bool,
    confidence: float,
    minimum: int,
    threshold: str = "bonferroni",
) -> AuditSize:
    """The audit of the claim that catches σ/``detect``: ``size`` when the spec gives one (runs per
    canary, both halves, for many runs; canaries for one run) and it does, else the planned one
    (never below ``minimum``); :class:`.Refused` at stage ``power`` when neither is possible.
    ``confidence`` is each result's (the audit's α shared over its results)."""
    unit = "canaries" if one_run else "audit_runs"

    def power(n: int) -> Power | None:
        return _power_of_size(claim, n, one_run=one_run, confidence=confidence, threshold=threshold)

    def planned() -> tuple[int | None, str | None]:
        """The planned size (None: no size on the ladder catches σ/detect) and why the ladder
        stopped where it stopped short of a simulated power."""
        plan = plan_audit(claim=claim, detect=detect, one_run=one_run, confidence=confidence, threshold=threshold)
        found = plan.canaries if one_run else None if plan.runs is None else 2 * plan.runs
        return (None if found is None else max(minimum, found)), plan.unsimulated

    if size is not None:
        found = power(size)
        if catches(found, detect):
            assert found is not None
            return AuditSize(size, found, detect, planned=False)
        why = unsimulated_at(claim.phases, _side(size, one_run), one_run=one_run, threshold=threshold)
        caught = f"has no simulated power ({why})" if found is None else f"catches σ/{found.detects:g}"
        if found is not None and found.detects is None:
            caught = "catches no leak up to σ/10"
        need, _ = planned()
        fix = f"{unit} = {need} would" if need is not None else f"no {unit} the planner tries would"
        raise Refused(
            "power",
            f"{unit} = {size} {caught}, short of the spec's detect = {detect:g} (σ/{detect:g} with 90%): "
            f"{fix} (`dpaudit-mix plan-audit`); nothing was run or charged",
        )
    need, stopped = planned()
    if need is None:
        why = "" if stopped is None else f" (the planner stopped: {stopped})"
        raise Refused(
            "power",
            f"no audit the planner tries catches σ/{detect:g} with 90% for this claim{why}: raise detect "
            f"(`dpaudit-mix plan-audit`); nothing was run or charged",
        )
    found = power(need)
    assert found is not None
    return AuditSize(need, found, detect, planned=True)


def power_problems(
    record: dict[str, Any],
    claim: Claim,
    *,
    size: int,
    one_run: bool,
    confidence: float,
    threshold: str = "bonferroni",
) -> list[str]:
    """check-release's view of a manifest's audit ``record``: its ``detect`` is a target the gate
    accepts, and the power recomputed from the claim at the audit's ``size`` both is the one
    recorded and catches σ/detect (a manifest cannot vouch for an audit weaker than it says)."""
    detect = record.get("detect")
    try:
        target = check_detect(detect)
    except InputError:
        return [f"audit: its detect {detect!r} is not a leak the gate holds an audit to ({LEAKS[0]} to {LEAKS[-1]})"]
    try:
        found = _power_of_size(claim, size, one_run=one_run, confidence=confidence, threshold=threshold)
    except InputError as exc:
        return [f"audit: its power cannot be recomputed from the claim: {exc}"]
    problems = []
    if not catches(found, target):
        caught = "nothing" if found is None or found.detects is None else f"σ/{found.detects:g}"
        problems.append(f"audit: at its size {size} it catches {caught}, short of its detect = {target:g}")
    if found is not None and record.get("power") != found.to_dict():
        problems.append("audit: the recorded power is not the one recomputed from the claim at the audit's size")
    return problems


def _power_of_size(claim: Claim, size: int, *, one_run: bool, confidence: float, threshold: str) -> Power | None:
    """The power of a release's audit of ``size``: canaries for one run, else runs per canary over
    both halves (half without the canary, half with), so :func:`power_at` sees one side's runs."""
    return power_at(claim, _side(size, one_run), one_run=one_run, confidence=confidence, threshold=threshold)


def _side(size: int, one_run: bool) -> int:
    """What :func:`power_at` reads of a release's audit size: the canaries, or one side's runs."""
    return size if one_run else size // 2


def power_sentence(audit: dict[str, Any], size: str, mechanism: str) -> str:
    """What a release card says of its audit's power, as the manifest recorded it: what an
    exactly-claimed ``mechanism`` shows at ``size``, the leak caught, and the detect it was held to."""
    power = audit.get("power")
    if not power:
        return "No power was recorded for this audit."
    low, high = power["tight_lower_bound_band"]
    caught = "no leak up to σ/10" if power["detects"] is None else f"σ/{power['detects']:g}"
    held = ""
    if "detect" in audit:
        how = "its size planned to meet it" if audit.get("planned") else "its size as the spec gave it"
        held = f" The gate held it to detect = {audit['detect']:g} (σ/{audit['detect']:g} caught with 90%; {how})."
    return (
        f"Power: an exactly-claimed {mechanism} gives ε_LB {power['tight_lower_bound']:.3f} ({low:.3f}–{high:.3f}) "
        f"with {size}; this audit catches {caught} with 90% ({power['method']}).{held}"
    )
