"""The stage machine every experiment track runs (docs/concepts/pipeline.md): mixture → pretrain → DP finetune,
evaluation included, for every (method, ε, seed) job.

A track describes each stage of a job as a :class:`Stage` (a content key and how to compute it);
the machine caches it under ``OUT/cache/<stage>/<key>`` with a checksum (:func:`..cache.cached`),
so a rerun or an interrupted run skips every finished stage; it holds what it computed in memory
(a cache folder may be unwritable), and it composes the mixture's privacy with the finetune's.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

from tqdm import tqdm

from .. import accounting
from ..base.backend import Backend
from ..base.threads import one_thread
from .methods import Mixture
from .mixing_track import MixingTrack, mixture_draw
from .rehearsal import REHEARSAL_IDS, Rehearsal, choose_by_rehearsal
from .stage_cache import KINDS, LAYOUT, Arrays, Job, Stage, StageCache

__all__ = [
    "KINDS",
    "LAYOUT",
    "REHEARSAL_IDS",
    "Arrays",
    "Job",
    "MixingTrack",
    "Privacy",
    "Rehearsal",
    "Run",
    "Stage",
    "StageCache",
    "Track",
    "choose_by_rehearsal",
    "composed_privacy",
    "mixture_draw",
    "preflight",
    "release_privacy",
    "run_stages",
]

T = TypeVar("T")


class Track(Protocol):
    """What an experiment supplies: its jobs, and per job how it mixes, pretrains, and is DP
    finetuned and evaluated. The finetune's result must carry ``finetune_phase`` (its Gaussian
    phase) and ``finetune_epsilon`` (its own ε, by the accountant that calibrated it)."""

    delta: float
    sequential: bool  # the finetune also sees the mixing data: the mixture's phase is its prior
    #: how finetune results are kept: "json", or "finetuned" when they carry the model (``model``)
    finetune_kind: str

    def jobs(self) -> list[Job]: ...

    def mixing_phases(self, epsilon: float) -> list[accounting.GaussianPhase]:
        """The DP phases a release at ``epsilon`` may run before its finetune."""

    def mixture(self, job: Job) -> Stage[Mixture] | None:
        """None: the job chooses no λ (it spends nothing before the finetune)."""

    def pretrain(self, job: Job, mixture: Mixture) -> Stage[Arrays] | None:
        """None: the finetune starts from a fresh model."""

    def finetune(
        self, job: Job, start: Arrays | None, start_key: str | None, prior: tuple[accounting.GaussianPhase, ...]
    ) -> Stage[dict[str, Any]]: ...

    def calibrations(self, epsilon: float) -> list[accounting.CalibrationRequest]:
        """The calibrations without a prior that a release at ``epsilon`` needs, which
        :func:`preflight` runs side by side (a track may leave out those it calibrates otherwise)."""

    def calibrate(self, epsilon: float, prior: tuple[accounting.GaussianPhase, ...]) -> None:
        """Calibrate the finetune's σ at ``epsilon`` after ``prior`` (raises if out of reach)."""


@dataclass(frozen=True)
class Privacy:
    """A release's total (ε, δ) per privacy unit."""

    epsilon_total: float
    delta_total: float
    releasable: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Run:
    """One finished job: its mixture, the finetune's result (metrics and accounting), its privacy
    and, for a track that keeps it, the finetuned model's weights (not in :meth:`to_dict`)."""

    job: Job
    secure: bool
    mixture: Mixture
    result: dict[str, Any]
    privacy: Privacy
    model: Arrays | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.job.method,
            "epsilon": self.job.epsilon,
            "seed": self.job.seed,
            **({"task": self.job.task} if self.job.task else {}),
            "secure": self.secure,
            **self.result,
            "mixture": self.mixture.to_dict(),
            **self.privacy.to_dict(),
        }


def release_privacy(
    mixture: Mixture, finetune: accounting.GaussianPhase, finetune_epsilon: float, delta: float, sequential: bool
) -> Privacy:
    """The release's total (ε, δ): parallel = max over the disjoint splits, sequential = the
    mixture and the finetune composed on the same data (PLD)."""
    if not mixture.releasable:
        return Privacy(math.inf, delta, False)
    phases = (mixture.phase,) if mixture.phase else ()
    if sequential:
        return Privacy(accounting.epsilon((*phases, finetune), delta), delta, True)
    costs = [(finetune_epsilon, delta)] + ([(accounting.epsilon(phases, delta), delta)] if phases else [])
    return Privacy(accounting.parallel(*costs)[0], delta, True)


def composed_privacy(
    mixtures: Sequence[Mixture], finetunes: Sequence[accounting.GaussianPhase], delta: float, sequential: bool
) -> Privacy:
    """Several releases on the same data together (the per-task protocol releases one λ and one
    model per task), composed by PLD: parallel = the max over the two disjoint splits of each
    split's composition, sequential = everything composed on one."""
    if not all(m.releasable for m in mixtures):
        return Privacy(math.inf, delta, False)
    mixing = tuple(m.phase for m in mixtures if m.phase)
    if sequential:
        return Privacy(accounting.epsilon((*mixing, *finetunes), delta), delta, True)
    costs = [accounting.epsilon(tuple(finetunes), delta)]
    costs += [accounting.epsilon(mixing, delta)] if mixing else []
    return Privacy(max(costs), delta, True)


def preflight(track: Track, epsilons: Sequence[float]) -> None:
    """Calibrate every σ the run will need, so an unreachable ε fails before anything is written:
    per ε, each private mixture's phase, then the finetune alone and (sequential) after each of them.
    Those without a prior run first, side by side (:func:`accounting.calibrate_each`), the
    subsampled ones first (their searches are the slow ones), so the loop finds them answered."""
    asked = [request for eps in epsilons for request in track.calibrations(eps)]
    accounting.calibrate_each(sorted(asked, key=lambda request: request[2] == 1.0))  # stable
    for eps in epsilons:
        phases = track.mixing_phases(eps)  # calibrated here, whatever the composition
        priors: list[tuple[accounting.GaussianPhase, ...]] = [()]
        if track.sequential:
            priors += [(phase,) for phase in phases]
        for prior in priors:
            track.calibrate(eps, prior)


def _prior(track: Track, mixture: Mixture) -> tuple[accounting.GaussianPhase, ...]:
    """What the finetune composes after: the mixture's phase when it sees the mixing data too."""
    return (mixture.phase,) if track.sequential and mixture.phase else ()


def _finished(track: Track, cache: StageCache, jobs: list[Job], mixtures: dict[Job, Mixture]) -> bool:
    """Whether every pretraining and finetune of ``jobs`` is on disk (a resumed run skips them)."""
    for job in jobs:
        pretraining = track.pretrain(job, mixtures[job])
        if pretraining is not None and not cache.has("pretrain", pretraining.key, "arrays"):
            return False
        start_key = None if pretraining is None else pretraining.key
        # the stage's key alone: its compute (which would need the pretrained weights) never runs
        finetune = track.finetune(job, None, start_key, _prior(track, mixtures[job]))
        if not cache.has("finetune", finetune.key, track.finetune_kind):
            return False
    return True


def _warm(track: Track, secure: bool, jobs: list[Job], mixtures: dict[Job, Mixture]) -> dict[tuple[str, str, str], Any]:
    """A worker's share (module level, so joblib and Dask can ship it): its jobs' pretraining and
    finetunes, on one thread, returned for the parent to put in the cache."""
    cache = StageCache(None)
    with one_thread():
        _models(track, cache, jobs, mixtures, secure, progress=False)
    return cache.computed


def _groups(track: Track, jobs: list[Job], mixtures: dict[Job, Mixture]) -> list[list[Job]]:
    """The parallel units: the jobs that share a pretraining (it is computed once, in one worker,
    then each of their finetunes), and each job without one on its own. Longest first, so that
    the workers finish together: the units with a pretraining by how many finetunes follow it,
    then the finetunes alone, the shortest units, which fill the gaps at the end (whole seeds as
    units left a worker idle for a third of the text pipeline: 3 seeds on 2 workers)."""
    shared: dict[str, list[Job]] = {}
    alone: list[list[Job]] = []
    for job in jobs:
        pretraining = track.pretrain(job, mixtures[job])
        if pretraining is None:
            alone.append([job])
        else:
            shared.setdefault(pretraining.key, []).append(job)
    return sorted(shared.values(), key=len, reverse=True) + alone  # stable: ties keep the jobs' order


def run_stages(
    track: Track,
    cache: StageCache,
    progress: bool = True,
    secure: bool = False,
    backend: Backend | None = None,
) -> list[Run]:
    """Every job of ``track``; each stage's output is computed at most once. The mixtures are
    computed here first; with a parallel ``backend`` (local joblib processes or Dask) each unfinished
    pretraining with its finetunes is then a task (:func:`_groups`), whose outputs come back here and go
    into the cache, which stays the one place results land; the runs are then read from it, so
    they are the same as one process's (every stage runs on one thread: :func:`one_thread`)."""
    backend = backend or Backend()
    show = {"disable": not progress, "file": sys.stderr}
    with one_thread():
        jobs = track.jobs()
        mixtures: dict[Job, Mixture] = {}
        for job in tqdm(jobs, desc="mixtures", unit="λ", **show):
            choice = track.mixture(job)
            mixtures[job] = (
                Mixture(None, None) if choice is None else Mixture.from_dict(cache.json("mixture", _as_dict(choice)))
            )
    if backend.parallel:
        todo = [group for group in _groups(track, jobs, mixtures) if not _finished(track, cache, group, mixtures)]
        tasks = [(group, {job: mixtures[job] for job in group}) for group in todo]
        bar = tqdm(total=len(tasks), desc=f"models ({backend.label})", unit="pretraining", **show)
        for _, computed in backend.unordered(_warm, tasks, shared=(track, secure)):
            for (stage, key, kind), value in computed.items():
                cache.offer(stage, key, kind, value)
            bar.update()
        bar.close()
    with one_thread():
        return _models(track, cache, jobs, mixtures, secure, progress)


def _models(
    track: Track, cache: StageCache, jobs: list[Job], mixtures: dict[Job, Mixture], secure: bool, progress: bool
) -> list[Run]:
    """Each job's pretraining (shared by jobs with the same key) and DP finetune, with its privacy."""
    show = {"disable": not progress, "file": sys.stderr}
    starts: dict[Job, str | None] = {}
    held: dict[str, Arrays] = {}  # computed or loaded once, never re-read: the cache may be unwritable
    for job in tqdm(jobs, desc="pretrain", unit="model", **show):
        pretraining = track.pretrain(job, mixtures[job])
        starts[job] = None if pretraining is None else pretraining.key
        if pretraining is not None and pretraining.key not in held:
            held[pretraining.key] = cache.arrays("pretrain", pretraining)

    runs = []
    for job in tqdm(jobs, desc="finetune", unit="model", **show):
        mixture, start = mixtures[job], starts[job]
        finetune = track.finetune(job, None if start is None else held[start], start, _prior(track, mixture))
        kept = cache.get("finetune", finetune.key, track.finetune_kind, finetune.compute)
        result = {k: v for k, v in kept.items() if k != "model"}
        phase = accounting.GaussianPhase(**result["finetune_phase"])
        privacy = release_privacy(mixture, phase, result["finetune_epsilon"], track.delta, track.sequential)
        runs.append(Run(job, secure, mixture, result, privacy, kept.get("model")))
    return runs


def _as_dict(choice: Stage[Mixture]) -> Stage[dict[str, Any]]:
    """The mixture stage as its JSON form (what the cache stores)."""
    return Stage(choice.key, lambda: choice.compute().to_dict())
