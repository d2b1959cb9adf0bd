"""An audit spec's one-run mode (``one_run = true``): the mechanism trains **once** per setting
with ``one_run_canaries`` canaries, each in with probability ½ (membership from the spec's seed),
and :func:`.one_run.audit_one_run` tests the claim on each threat model's canary scores.

As in the multi-run engine, a σ = 0 control runs the same code with the noise removed: if even
its canaries, released in the clear, do not reject the claim, the audit cannot see leakage and
is inconclusive. Each setting's scores are kept as a checked chunk (:mod:`.chunks`), so a killed
audit resumes after its last finished training run. Every result is tested at 1 − α/(private
results), so that the audit's verdict holds at the spec's confidence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..base import owned
from ..base.atomic import write_json, write_npz
from ..base.errors import present
from ..base.randomness import stream
from ..base.reporting import Block, write_pages
from ..problem import Problem
from .many_run.chunks import ChunkStore
from .many_run.engine import score_label, spec_hash
from .many_run.result import summary_json
from .mechanisms import mechanism
from .mechanisms.base import CanaryCollector, RunPlan, Setting
from .one_run.audit import OneRunResult, audit_one_run
from .one_run.report import canary_figure, one_run_power_line
from .sizing import sized
from .spec import THREATS, AuditSpec, mixing_data, resolve_problem
from .verdict import result_confidence, summary_fields


@dataclass(frozen=True)
class OneRunSetting:
    """One threat model's one-run audit of one setting (σ as calibrated, or the σ = 0 control)."""

    threat: str
    noise: bool
    result: OneRunResult

    @property
    def name(self) -> str:
        return score_label("max_clip", self.threat, self.noise)

    def to_dict(self) -> dict[str, Any]:
        return {"canary": "max_clip", "threat": self.threat, "noise": self.noise, **self.result.to_dict()}


@dataclass(frozen=True)
class OneRunSummary:
    """audit.json of a one-run audit."""

    claimed_epsilon: float
    delta: float
    violation: bool
    inconclusive: bool
    blind_controls: tuple[str, ...]
    results: tuple[OneRunSetting, ...]
    mechanism: str
    noise_multiplier: float
    calibrated_noise_multiplier: float
    problem: dict[str, Any]
    canaries: dict[str, Any]
    confidence: float
    confidence_per_result: float
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {"one_run": True, **summary_json(self)}


@dataclass(frozen=True)
class OneRunOutcome:
    summary: OneRunSummary
    membership: np.ndarray
    scores: dict[tuple[str, bool], np.ndarray]  # (threat, noise) → each canary's score


def membership(spec: AuditSpec) -> np.ndarray:
    """Which canaries are in: each with probability ½, from the spec's seed."""
    m = spec.one_run_canaries
    return stream(spec.seed, "canary-membership", mechanism=spec.mechanism, canaries=m).numpy().random(m) < 0.5


def run_one_run_audit(
    spec: AuditSpec,
    out: Path,
    *,
    noise_multiplier: float | None = None,
    problem: Problem | None = None,
    report: Callable[[OneRunOutcome, Path], None] | None = None,
) -> OneRunOutcome:
    """Run (or resume) the one-run audit ``spec``; ``noise_multiplier`` replaces the calibrated σ
    the run uses (the claim stays the calibrated one)."""
    owned.require_free(out)  # a folder in use: refused before the problem is built
    full = problem if problem is not None else resolve_problem(spec)
    plan: RunPlan[CanaryCollector] = mechanism(spec.mechanism).one_run(  # type: ignore[attr-defined]
        spec, full, mixing_data(full, spec), noise_multiplier
    )
    settings = [Setting("max_clip", noise) for noise in ((True, False) if spec.controls else (True,))]
    planned = sized(spec, plan.claimed_phases, sum(s.noise for s in settings) * len(spec.threats), plan.accountant)
    if planned != spec:  # the canaries its detect asks for: the mechanism's plan holds as many
        spec = planned
        plan = mechanism(spec.mechanism).one_run(spec, full, mixing_data(full, spec), noise_multiplier)  # type: ignore[attr-defined]
    member = membership(spec)
    ids = np.arange(spec.one_run_canaries)
    with owned.folder_lock(out, "audit"):
        with ChunkStore(out, spec_hash(spec, plan.noise_multiplier, full), THREATS) as store:
            for setting in settings:
                if store.load(setting.name, ids) is None:
                    store.save(setting.name, ids, plan.collect(setting, member))
            scores = {
                (t, s.noise): present(store.load(s.name, ids), f"{s.name}'s scores changed on disk; run it again")[t]
                for s in settings
                for t in spec.threats
            }
        outcome = _analyse(spec, plan, member, scores)
        if report is not None:
            report(outcome, out)
    return outcome


def _analyse(
    spec: AuditSpec, plan: RunPlan[CanaryCollector], member: np.ndarray, scores: dict[tuple[str, bool], np.ndarray]
) -> OneRunOutcome:
    private = sum(noise for _, noise in scores)
    per_result = result_confidence(spec.confidence, private)
    results = tuple(
        OneRunSetting(
            threat,
            noise,
            audit_one_run(
                values,
                member,
                epsilon=spec.epsilon,
                delta=spec.delta,
                phases=plan.claimed_phases,
                confidence=per_result,
                accountant=plan.accountant,
                profile_bound=noise,  # a control's profile bound says nothing the verdict does not
                seed=spec.seed,
                label=score_label("max_clip", threat, noise),
            ),
        )
        for (threat, noise), values in scores.items()
    )
    summary = OneRunSummary(**summary_fields(spec, plan, results, lambda r: r.result.violation, per_result))
    return OneRunOutcome(summary, member, scores)


def _line(found: OneRunSetting) -> str:
    """A result's line in the report; a control's says whether it sees its canaries (as it must)."""
    if found.noise:
        return f"{found.result.verdict_line()}. {one_run_power_line(found.result)}"
    seen = "sees its canaries" if found.result.violation else "BLIND: its canaries do not reject the claim"
    r = found.result
    return f"{seen} (ε_LB = {r.epsilon_lower_bound:.3f}; {r.correct} of {r.guesses} right)"


def write_one_run_report(outcome: OneRunOutcome, out: Path) -> None:
    """audit.json, report.md/html and each setting's canary scores (``scores/<label>.npz``, with
    ``scores`` and ``membership``: ``audit-scores --one-run`` on one gives its result)."""
    summary = outcome.summary
    m = len(outcome.membership)
    head = (
        f"Mechanism {summary.mechanism} on {summary.problem['name']} / {summary.problem['task']}, audited from one "
        f"training run with {m} Dirac canaries ({int(outcome.membership.sum())} in); claimed (ε, δ) = "
        f"({summary.claimed_epsilon:g}, {summary.delta:g}); σ = {summary.noise_multiplier:.4g} (calibrated "
        f"{summary.calibrated_noise_multiplier:.4g}); each result at {summary.confidence_per_result:.4g}, so that "
        f"the verdict holds at {summary.confidence:.0%}. ε_LB: the larger of Steinke, Nasr & Jagielski (2023) "
        "and the f-DP bound of Mahloujifar, Melis & Chaudhuri (2025), both with abstention; the claimed curve "
        "is tested whole by f-DP."
    )
    verdict = (
        "VIOLATION: the run released more than the claim allows"
        if summary.violation
        else "INCONCLUSIVE: a σ = 0 control did not reject the claim; this audit cannot see leakage"
        if summary.inconclusive
        else "No violation found"
    )
    rows = [["setting", "result"]] + [[r.name, _line(r)] for r in summary.results]
    drawn = {score_label("max_clip", t, noise): values for (t, noise), values in outcome.scores.items()}
    blocks: list[Block] = [
        ("p", head),
        ("strong", verdict),
        ("table", rows),
        ("figure", canary_figure(drawn, outcome.membership, out)),
    ]
    write_pages(out, "dpaudit-mix one-run audit", blocks)
    paths = []
    for (threat, noise), values in outcome.scores.items():
        path = out / "scores" / f"{score_label('max_clip', threat, noise)}.npz"
        write_npz(path, scores=values, membership=outcome.membership.astype(np.int64))
        paths.append(path)
    owned.replace(out, "scores", paths)
    write_json(out / "audit.json", summary.to_dict())
