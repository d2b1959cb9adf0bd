"""The audit run: neighbouring fits in persisted chunks, scored, attacked and bounded.

Half the runs train on D ∪ {canary}, half on D (assignment from the seed); everything else is
identical. One batched fit per (canary, noise) setting yields both threat models' scores:
black-box from the released λ, white-box from the noisy gradients of every step. Finished
chunks go to disk as they complete (see :mod:`.chunks`), so fitting needs memory for a chunk
only and a killed audit resumes where it stopped; since run r's randomness is its own, any
chunking and either backend give identical results. The analysis then holds every run's scores
and is refused up front where they cannot fit in memory.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from joblib import Parallel, delayed
from tqdm import tqdm

from .. import accounting, randomness
from ..cache import json_sha256
from ..data import registry
from ..errors import InputError, present, require
from ..learner import BLOCK, Canary, LearnerConfig, default_threads, fit
from ..problem import Problem, load
from ..randomness import Stream, stream
from ..resources import require_memory
from ..specfile import Seed, check_fields, load_spec_file
from . import BACKENDS
from .attack import STRATEGIES, AttackResult
from .canaries import (
    CANARY_KINDS,
    NATURAL_POLICIES,
    black_box_scores,
    max_clip_canary,
    natural_canary,
    natural_canary_index,
)
from .chunks import ChunkStore
from .profile import TradeOff, claimed_tradeoff
from .result import AuditSummary, SettingResult
from .scores import analyse

THREATS = ("black_box", "white_box")


@dataclass(frozen=True)
class AuditSpec:
    """An audit, as written in ``audits/*.toml`` (every key optional, unknown keys rejected)."""

    problem: str = "mnist"  # an embedded problem name, or a path to a problem file
    task: str = registry.DEFAULT_TASK
    epsilon: float = 1.0
    delta: float = 1e-5
    rho: float = 0.1  # fraction of the problem's examples used as the mixing data D
    steps: int = 100
    clip: float = LearnerConfig.clip
    sample_rate: float = 1.0
    learning_rate: float = 1.0
    user_level: bool = False  # neighbours differ by one user (the canary is one more user)
    canaries: tuple[str, ...] = CANARY_KINDS
    natural_policy: str = "most_influential"
    natural_index: int = 0
    threats: tuple[str, ...] = THREATS
    controls: bool = True  # also run every setting with the noise removed (σ = 0)
    runs: int = 2_000
    seed: Seed = 0
    confidence: float = 0.95
    threshold: str = STRATEGIES[0]  # how thresholds are chosen: "bonferroni" (all runs) or "split"
    chunk_size: int = 512

    def __post_init__(self) -> None:
        check_fields(self)
        accounting.check_epsilon(self.epsilon)
        accounting.check_delta(self.delta)
        require(0 < self.rho <= 1, f"rho must be in (0, 1], got {self.rho}")
        require(self.runs >= 4, f"runs must be >= 4 (two halves of in and out runs), got {self.runs}")
        require(0 < self.confidence < 1, f"confidence must be in (0, 1), got {self.confidence}")
        require(self.chunk_size >= 1, f"chunk_size must be >= 1, got {self.chunk_size}")
        require(
            len(self.canaries) >= 1 and set(self.canaries) <= set(CANARY_KINDS),
            f"canaries must be a non-empty subset of {CANARY_KINDS}, got {list(self.canaries)}",
        )
        require(
            len(self.threats) >= 1 and set(self.threats) <= set(THREATS),
            f"threats must be a non-empty subset of {THREATS}, got {list(self.threats)}",
        )
        require(self.threshold in STRATEGIES, f"threshold must be one of {STRATEGIES}, got {self.threshold!r}")
        require(
            self.natural_policy in NATURAL_POLICIES,
            f"natural_policy must be one of {NATURAL_POLICIES}, got {self.natural_policy!r}",
        )
        LearnerConfig(
            steps=self.steps,
            clip=self.clip,
            sample_rate=self.sample_rate,
            learning_rate=self.learning_rate,
            user_level=self.user_level,
        )


def load_spec(path: str | Path, **overrides: Any) -> AuditSpec:
    """Read a TOML audit spec; ``overrides`` (CLI flags, None = not given) take precedence."""
    return load_spec_file(AuditSpec, path, **overrides)


def resolve_problem(spec: AuditSpec) -> Problem:
    if spec.problem in registry.PROBLEMS:
        return registry.build(spec.problem, spec.task)
    return load(registry.problem_path(spec.problem))


def mixing_data(problem: Problem, spec: AuditSpec) -> Problem:
    """D: a seeded fraction ρ of the problem's examples."""
    size = max(1, round(spec.rho * problem.n))
    rows = np.sort(stream(spec.seed, "audit-mixing-rows", rho=spec.rho).numpy().permutation(problem.n)[:size])
    return problem.subset(rows)


def assignments(spec: AuditSpec) -> np.ndarray:
    """Which runs hold the canary: half of them, drawn from the seed."""
    return stream(spec.seed, "audit-assignment", runs=spec.runs).numpy().permutation(spec.runs) < spec.runs // 2


@dataclass(frozen=True)
class Setting:
    canary: str
    noise: bool

    @property
    def name(self) -> str:
        return f"{self.canary}-{'noise' if self.noise else 'nonoise'}"


def _chunk_scores(
    problem: Problem,
    config: LearnerConfig,
    canary: Canary,
    runs: np.ndarray,
    include: np.ndarray,
    noise: Stream,
    threads: int,
) -> dict[str, np.ndarray]:
    """Fit one chunk of runs; both threat models' scores (module level, so Dask can ship it)."""
    result = fit(problem, config, runs, noise, canary=canary, include=include, threads=threads)
    return {
        "black_box": black_box_scores(canary, result.weights),
        "white_box": present(result.whitebox_scores, "a canary fit returned no white-box scores"),
    }


def _spec_hash(spec: AuditSpec, sigma: float, problem: Problem) -> str:
    """Everything that determines the scores: a resumed audit must match it exactly."""
    h = json_sha256({**asdict(spec), "sigma": sigma, "streams": randomness.VERSION})
    for array in (problem.logp, problem.heldout_logp, problem.users, problem.heldout_users):  # users pick the
        h.update(b"-" if array is None else np.ascontiguousarray(array).tobytes())  # units and the canary
    return h.hexdigest()


def _dask_client(scheduler: str | None) -> Any:
    """A connected Dask client; checked before the audit writes anything."""
    from dask.distributed import Client

    require(scheduler is not None, "--backend dask needs --scheduler ADDR")
    try:
        return Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None


def _run_chunks(
    jobs: list[tuple[Setting, int, int]], args: dict[Setting, tuple], client: Any, threads: int
) -> Iterator[tuple[Setting, np.ndarray, dict[str, np.ndarray]]]:
    """Yield finished chunks as they complete, locally (joblib threads) or on a Dask cluster."""

    def submit(job: tuple[Setting, int, int]) -> tuple[tuple, np.ndarray]:
        setting, start, stop = job
        problem, config, canary, include, noise = args[setting]
        runs = np.arange(start, stop)
        return (problem, config, canary, runs, include[runs], noise, 1), runs

    if client is not None:
        from dask.distributed import as_completed

        with client:
            futures = {}
            for job in jobs:
                call, runs = submit(job)
                futures[client.submit(_chunk_scores, *call, pure=False)] = (job[0], runs)
            for fut in as_completed(futures):
                setting, runs = futures[fut]
                yield setting, runs, fut.result()
        return

    def one(job: tuple[Setting, int, int]) -> tuple[Setting, np.ndarray, dict[str, np.ndarray]]:
        call, runs = submit(job)
        return job[0], runs, _chunk_scores(*call)

    # joblib threads: numpy and BLAS release the GIL, and nothing is pickled.
    yield from Parallel(n_jobs=threads, prefer="threads", return_as="generator_unordered")(
        delayed(one)(job) for job in jobs
    )


#: bytes per run the analysis holds besides the scores (16 per setting, kept for the report):
#: include, the attack's sorted copy, the diagnostics' ranks and bootstrap resamples.
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
    noise_multiplier: float | None = None,
    backend: str = "local",
    scheduler: str | None = None,
    threads: int | None = None,
    progress: bool = True,
    problem: Problem | None = None,
) -> AuditOutcome:
    """Run (or resume) the audit described by ``spec``, persisting chunks under ``out``.

    ``problem`` replaces the spec's problem (callers that build one in memory, like verification).
    """
    require(backend in BACKENDS, f"unknown backend {backend!r}; choose from {BACKENDS}")
    settings = [Setting(c, noise) for c in spec.canaries for noise in ((True, False) if spec.controls else (True,))]
    require_memory(spec.runs * (ANALYSIS_BYTES_PER_RUN + 16 * len(settings)), f"an audit of {spec.runs} runs")
    threads = threads or default_threads()
    full = problem if problem is not None else resolve_problem(spec)
    data = mixing_data(full, spec)
    calibrated = accounting.calibrate(spec.epsilon, spec.delta, spec.sample_rate, spec.steps)
    sigma = calibrated if noise_multiplier is None else noise_multiplier
    require(sigma >= 0, f"noise multiplier must be >= 0, got {sigma}")
    include = assignments(spec)
    canaries: dict[str, Canary] = {}
    canary_info: dict[str, Any] = {}
    if "natural" in spec.canaries:
        # At user level the canary is a held-out user, all of their rows; a problem without held-out
        # user ids (image worlds) has one-example users, so a held-out example is a whole user.
        by_user = spec.user_level and full.heldout_users is not None
        index = natural_canary_index(full, spec.natural_policy, spec.clip, spec.natural_index, spec.seed, by_user)
        canaries["natural"] = natural_canary(full, index, by_user)
        canary_info["natural"] = {
            "policy": spec.natural_policy,
            "heldout_index": index,
            "examples": len(np.atleast_2d(present(canaries["natural"].logp, "a natural canary has rows"))),
        }
    if "max_clip" in spec.canaries:
        canaries["max_clip"] = max_clip_canary(full.k, spec.clip)
        direction = present(canaries["max_clip"].gradient, "a max-clip canary has a direction")
        canary_info["max_clip"] = {"norm": spec.clip, "direction": direction.tolist()}
    base = LearnerConfig(
        steps=spec.steps,
        clip=spec.clip,
        sample_rate=spec.sample_rate,
        learning_rate=spec.learning_rate,
        user_level=spec.user_level,
    )
    args = {
        s: (
            data,
            replace(base, noise_multiplier=sigma if s.noise else 0.0),
            canaries[s.canary],
            include,
            stream(spec.seed, "learner-noise", audit=s.name),
        )
        for s in settings
    }
    chunk = -(-spec.chunk_size // BLOCK) * BLOCK  # whole blocks, so floats do not depend on chunking
    bounds = [(start, min(start + chunk, spec.runs)) for start in range(0, spec.runs, chunk)]
    client = _dask_client(scheduler) if backend == "dask" else None  # every check before the first write
    with ChunkStore(out, _spec_hash(spec, sigma, full), THREATS) as store:
        # Fitting streams: a finished chunk goes to disk, and memory stays bounded by the chunk size.
        jobs = [(s, a, b) for s in settings for a, b in bounds if store.load(s.name, np.arange(a, b)) is None]
        store.warn()
        bar = tqdm(
            total=len(jobs), desc="audit chunks", unit="chunk", disable=not progress or not jobs, file=sys.stderr
        )
        for s, runs, chunk_scores in _run_chunks(jobs, args, client, threads):
            store.save(s.name, runs, chunk_scores)
            bar.update()
        bar.close()
        scores = {s: _gather(store, s, bounds, spec.runs) for s in settings}
    claimed_phases = (accounting.GaussianPhase(calibrated, spec.sample_rate, spec.steps),)
    claimed = claimed_tradeoff(spec.epsilon, spec.delta, claimed_phases)
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
                spec.epsilon,
                spec.delta,
                claimed,
                spec.sample_rate == 1.0,
                spec.confidence,
                spec.threshold,
                spec.seed,
                score_label(s.canary, threat, s.noise),
            )
            attacks[(s.canary, threat, s.noise)] = Attacked(found, scores_in, scores_out)
            results.append(SettingResult.of(result, s.canary, threat, s.noise))
    # A σ = 0 control releases its canary in the clear: if even it stays within the claim, this
    # audit (its runs, canary or attack) cannot see leakage, and its silence proves nothing.
    blind = tuple(r.name for r in results if not r.noise and not r.exceeds_claim)
    summary = AuditSummary(
        spec.epsilon,
        spec.delta,
        violation=any(r.noise and r.exceeds_claim for r in results),
        inconclusive=bool(blind),
        blind_controls=blind,
        results=tuple(results),
        noise_multiplier=sigma,
        calibrated_noise_multiplier=calibrated,
        problem={"name": spec.problem, "task": full.task, "n_mixing": data.n, "k": data.k},
        canaries=canary_info,
        confidence=spec.confidence,
        threshold_strategy=spec.threshold,
        claimed_tradeoff=claimed.describe(),
        seed=spec.seed,
    )
    return AuditOutcome(summary, attacks, claimed)
