"""The audit run as plan → collect → analyse.

*RunPlan*: the spec's mechanism (:mod:`.mechanisms`) fixes, before anything is written, what its
runs collect and what it claims. *Collect*: half the runs train with the canary, half without
(assignment from the seed), everything else identical; per (canary, noise) setting, chunks of
runs yield both threat models' scores and go to disk as they complete (see :mod:`.chunks`), so
memory stays bounded by a chunk and a killed audit resumes where it stopped; since run r's
randomness is its own, any chunking and either backend give identical results. *Analyse*: every
setting's scores go through :func:`.scores.analyse`, the same analysis as ``audit_scores``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ...base import owned, randomness
from ...base.backend import Backend
from ...base.cache import json_sha256
from ...base.errors import present, require
from ...base.resources import require_memory
from ...learner import BLOCK, default_threads
from ...problem import Problem
from ..accounted import Accounted
from ..attack import AttackResult
from ..claim import check_claim
from ..mechanisms import mechanism
from ..mechanisms.base import Collector, RunPlan, Setting
from ..profile import TradeOff, claimed_tradeoff
from ..sizing import sized
from ..spec import THREATS, AuditSpec, assignments, mixing_data, resolve_problem
from ..verdict import result_confidence, summary_fields
from .chunks import ChunkStore
from .result import AuditSummary, SettingResult
from .scores import analyse


def spec_hash(spec: AuditSpec, sigma: float, problem: Problem) -> str:
    """Everything that determines the scores: a resumed audit must match it exactly."""
    h = json_sha256({**asdict(spec), "sigma": sigma, "streams": randomness.VERSION})
    for array in (problem.logp, problem.heldout_logp, problem.users, problem.heldout_users):  # users pick the
        h.update(b"-" if array is None else np.ascontiguousarray(array).tobytes())  # units and the canary
    return h.hexdigest()


def _collect_chunk(
    collect: Collector, include: np.ndarray, setting: Setting, runs: np.ndarray
) -> dict[str, np.ndarray]:
    """One chunk's scores (module level, so Dask and worker processes can ship it)."""
    return collect(setting, runs, include[runs])


#: bytes per run the analysis holds besides the scores (16 per setting, kept for the report):
#: include, the attack's sorted copy, and the diagnostics' sorted copies and placements.
ANALYSIS_BYTES_PER_RUN = 72


def _gather(store: ChunkStore, setting: Setting, bounds: list[tuple[int, int]], runs: int) -> dict[str, np.ndarray]:
    """Every run's scores of one setting, read back from its (checked) chunks."""
    scores = {t: np.empty(runs) for t in THREATS}
    for a, b in bounds:
        data = present(
            store.load(setting.name, np.arange(a, b)),
            f"a chunk of {setting.name} changed on disk during the audit; run it again",
        )
        for t in THREATS:
            scores[t][a:b] = data[t]
    return scores


@dataclass(frozen=True)
class Attacked:
    """One setting's scores and the attack on them (its thresholds and the runs it counted, in the
    order in-scores then out-scores), for the report's figures and the per-setting score files."""

    attack: AttackResult
    scores_in: np.ndarray
    scores_out: np.ndarray


def score_label(canary: str, threat: str, noise: bool) -> str:
    """The name of a setting's scores: its file under ``OUT/scores/`` and the label its analysis
    draws with (``audit_scores(..., seed=spec.seed, label=...)`` on that file gives audit.json's result)."""
    return f"{canary}-{threat}-{'private' if noise else 'control'}"


@dataclass(frozen=True)
class AuditOutcome:
    """``summary`` is audit.json; ``attacks`` keeps each result's attack and scores for the report."""

    summary: AuditSummary
    attacks: dict[tuple[str, str, bool], Attacked]
    claimed: TradeOff


def run_audit(
    spec: AuditSpec,
    out: Path,
    *,
    noise_multiplier: float | None = None,
    backend: str = "local",
    scheduler: str | None = None,
    threads: int | None = None,
    progress: bool = True,
    problem: Problem | None = None,
    report: Callable[[AuditOutcome, Path], None] | None = None,
) -> AuditOutcome:
    """Run (or resume) the audit described by ``spec``, persisting chunks under ``out``.

    From the first write to the end of ``report``, the folder is locked: a second audit on it
    is refused, never mixed in.

    Args:
      spec: the audit.
      out: its folder (chunks, audit.json, the report).
      noise_multiplier: σ the runs use instead of the calibrated one (the claim stays the
        calibrated one: a smaller σ simulates a leak).
      backend: where the chunks run (``local`` or ``dask``).
      scheduler: the Dask scheduler's address, for ``backend="dask"``.
      threads: the workers the chunks run on.
      progress: show a progress bar.
      problem: a problem built in memory, instead of the spec's.
      report: called with the outcome and ``out`` once the audit is done.

    Returns:
      The ``AuditOutcome``: its summary (the verdict) and every result.

    Raises:
      InputError: a spec, folder or setting that is bad (before anything runs).
    """
    require(
        noise_multiplier is None or (math.isfinite(noise_multiplier) and noise_multiplier >= 0),
        f"noise multiplier must be >= 0 and finite, got {noise_multiplier}",
    )
    owned.require_free(out)  # a folder in use: refused before the problem is built
    settings = [Setting(c, noise) for c in spec.canaries for noise in ((True, False) if spec.controls else (True,))]
    threads = threads or default_threads()
    full = problem if problem is not None else resolve_problem(spec)
    data = mixing_data(full, spec)
    plan = mechanism(spec.mechanism).plan(spec, full, data, noise_multiplier)
    spec = sized(spec, plan.claimed_phases, sum(s.noise for s in settings) * len(spec.threats), plan.accountant)
    require_memory(spec.runs * (ANALYSIS_BYTES_PER_RUN + 16 * len(settings)), f"an audit of {spec.runs} runs")
    include = assignments(spec)
    chunk = -(-spec.chunk_size // BLOCK) * BLOCK  # whole blocks, so floats do not depend on chunking
    bounds = [(start, min(start + chunk, spec.runs)) for start in range(0, spec.runs, chunk)]
    # every check before the first write; local chunks run on joblib threads (numpy and BLAS
    # release the GIL) or, for Python-bound torch loops, processes
    runner = Backend.connect(backend, scheduler, threads)
    with owned.folder_lock(out, "audit"):
        scores = _collect(
            spec,
            out,
            plan,
            full=full,
            include=include,
            bounds=bounds,
            settings=settings,
            runner=runner,
            progress=progress,
        )
        outcome = _analyse(spec, plan, settings, include, scores)
        if report is not None:
            report(outcome, out)
    return outcome


def _collect(
    spec: AuditSpec,
    out: Path,
    plan: RunPlan[Collector],
    *,
    full: Problem,
    include: np.ndarray,
    bounds: list[tuple[int, int]],
    settings: list[Setting],
    runner: Backend,
    progress: bool,
) -> dict[Setting, dict[str, np.ndarray]]:
    """Every setting's scores of every run: finished chunks from disk, the others collected on
    ``runner`` and saved as each finishes (memory stays bounded by the chunk size)."""
    with ChunkStore(out, spec_hash(spec, plan.noise_multiplier, full), THREATS) as store:
        jobs = [(s, a, b) for s in settings for a, b in bounds if store.load(s.name, np.arange(a, b)) is None]
        store.warn()
        bar = tqdm(
            total=len(jobs), desc="audit chunks", unit="chunk", disable=not progress or not jobs, file=sys.stderr
        )
        chunks = [(s, np.arange(a, b)) for s, a, b in jobs]
        try:
            for i, chunk_scores in runner.unordered(
                _collect_chunk,
                chunks,
                prefer="processes" if plan.processes else "threads",
                shared=(plan.collect, include),
            ):
                store.save(jobs[i][0].name, chunks[i][1], chunk_scores)
                bar.update()
        finally:
            runner.close()
        bar.close()
        return {s: _gather(store, s, bounds, spec.runs) for s in settings}


def _analyse(
    spec: AuditSpec,
    plan: RunPlan[Collector],
    settings: list[Setting],
    include: np.ndarray,
    scores: dict[Setting, dict[str, np.ndarray]],
) -> AuditOutcome:
    """Every (setting, threat)'s bounds and verdicts from the collected scores, and the summary."""
    check_claim(spec.epsilon, spec.delta, plan.claimed_phases, plan.accountant)
    claimed = claimed_tradeoff(spec.epsilon, spec.delta, plan.claimed_phases)
    accounted = Accounted.of(spec.epsilon, spec.delta, plan.claimed_phases, plan.accountant)
    per_result = result_confidence(spec.confidence, sum(s.noise for s in settings) * len(spec.threats))
    results = []
    attacks: dict[tuple[str, str, bool], Attacked] = {}
    for s in settings:
        for threat in spec.threats:
            values = scores[s][threat]
            require(
                bool(np.all(np.isfinite(values))),
                f"{s.canary}/{threat}: {int(np.sum(~np.isfinite(values)))} of {spec.runs} scores are not finite "
                "(an infinite clip, learning rate or noise multiplier?): the audit cannot see anything",
            )
            scores_in, scores_out = values[include], values[~include]
            result, found = analyse(
                scores_in,
                scores_out,
                epsilon=spec.epsilon,
                delta=spec.delta,
                claimed=claimed,
                phases=plan.claimed_phases,
                confidence=per_result,
                threshold=spec.threshold,
                seed=spec.seed,
                label=score_label(s.canary, threat, s.noise),
            )
            attacks[(s.canary, threat, s.noise)] = Attacked(found, scores_in, scores_out)
            results.append(SettingResult.of(replace(result, accounted=accounted), s.canary, threat, s.noise))
    # A σ = 0 control releases its canary in the clear: if even it stays within the claim, this
    # audit (its runs, canary or attack) cannot see leakage, and its silence proves nothing.
    summary = AuditSummary(
        **summary_fields(spec, plan, results, lambda r: r.exceeds_claim, per_result),
        threshold_strategy=spec.threshold,
        claimed_tradeoff=claimed.describe(),
    )
    return AuditOutcome(summary, attacks, claimed)
