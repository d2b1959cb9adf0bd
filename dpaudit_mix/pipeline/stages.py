"""The stage machine every experiment track runs (DESIGN §8): mixture → pretrain → DP finetune,
evaluation included, for every (method, ε, seed) job.

A track describes each stage of a job as a :class:`Stage` (a content key and how to compute it);
the machine caches it under ``OUT/cache/<stage>/<key>`` with a checksum (:func:`..cache.cached`),
so a rerun or an interrupted run skips every finished stage; it holds what it computed in memory
(a cache folder may be unwritable), and it composes the mixture's privacy with the finetune's.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
from tqdm import tqdm

from .. import accounting
from .. import problem as problem_io
from ..atomic import write_json
from ..backend import Backend
from ..cache import cached, content_key, load_json, load_npz, save_npz, verified
from ..errors import InputError, present
from ..models import device
from ..problem import Problem
from ..randomness import Key, Stream, stream
from ..threads import one_thread
from ..tuning import rehearse
from .methods import (
    LOSS_BOUND,
    PRIVATE_METHODS,
    MixingSpec,
    Mixture,
    choose,
    mix_epsilon,
    mixing_phase,
    mixing_request,
)

T = TypeVar("T")
Arrays = dict[str, np.ndarray]

#: the layout of the stage files; part of every file name, so a changed layout never loads an old file.
LAYOUT = 2


@dataclass(frozen=True)
class Job:
    """One cell of a track's grid: a method (for WarmSyn, an ablation row) at ε in seed ``seed``,
    for ``task`` (a mixing track's task: "multiclass", "lm", or a digit under the per-task protocol)."""

    method: str
    epsilon: float
    seed: int
    task: str = ""


@dataclass(frozen=True)
class Stage(Generic[T]):
    """One cached step of a job: its content key (which names its file) and how to compute it."""

    key: str
    compute: Callable[[], T]


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


def _save_finetuned(path: Path, value: dict[str, Any]) -> None:
    """A finetune's result (JSON, as bytes) and, under ``model``, its weights: one npz, no pickle."""
    result = json.dumps({k: v for k, v in value.items() if k != "model"}, sort_keys=True).encode()
    weights = {f"model.{name}": array for name, array in value.get("model", {}).items()}
    save_npz(path, {"result": np.frombuffer(result, dtype=np.uint8), **weights})


def _load_finetuned(path: Path) -> dict[str, Any]:
    arrays = load_npz(path)
    result: dict[str, Any] = json.loads(arrays["result"].tobytes().decode("utf-8"))
    model = {name.removeprefix("model."): a for name, a in arrays.items() if name.startswith("model.")}
    return {**result, "model": model} if model else result


#: a stage's kind: its file extension, how it is saved and loaded.
KINDS: dict[str, tuple[str, Callable[[Path, Any], None], Callable[[Path], Any]]] = {
    "arrays": ("npz", save_npz, load_npz),
    "json": ("json", write_json, load_json),
    "problem": ("npz", lambda path, value: problem_io.save(value, path), problem_io.load),
    "finetuned": ("npz", _save_finetuned, _load_finetuned),  # a finetune's result with its model's weights
}


class StageCache:
    """Finished stage outputs under ``root/<stage>/<key>.<ext>``, each reused only if it passes its
    checksum. A root that cannot be written is said once, then only read: the run holds its stages
    in memory and finishes. Nothing is created before the first stage (a preflight writes nothing).

    ``salt`` (a file world's content hash) is in every entry's name, so that stages computed on
    one version of a user's files are never reused for another (the stage keys, which seed the
    streams, name the world by its name only). A worker's cache (``root`` None) only holds what it
    computes, in ``computed``: the worker sends that back, and the parent offers it (:meth:`offer`)
    to the one cache where results land."""

    def __init__(self, root: Path | None, salt: str = "") -> None:
        self.root = root
        self.salt = salt  # a file world's content hash: its stages are never served for other files
        self.computed: dict[tuple[str, str, str], Any] = {}  # (stage, key, kind) → value, in memory
        self._offered: dict[tuple[str, str], Any] = {}

    @cached_property
    def writable(self) -> bool:
        if self.root is None:
            return False
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.root, prefix=".probe-"):
                pass
        except OSError as exc:
            print(
                f"dpaudit-mix: warning: cannot write the stage cache {self.root}: {exc.strerror or exc}; every "
                "stage is computed (none is kept for a rerun)",
                file=sys.stderr,
            )
            return False
        return True

    def _path(self, stage: str, key: str, kind: str) -> Path | None:
        if self.root is None:
            return None
        salted = {"data": self.salt} if self.salt else {}
        return self.root / stage / f"{content_key(key=key, layout=LAYOUT, **salted)}.{KINDS[kind][0]}"

    def get(self, stage: str, key: str, kind: str, compute: Callable[[], T]) -> T:
        """The stage's output: checked from disk, else offered by a worker, else computed (and saved)."""
        path = self._path(stage, key, kind)

        def value() -> T:
            if (stage, key) in self._offered:
                return self._offered.pop((stage, key))
            result = compute()
            if path is None:
                self.computed[(stage, key, kind)] = result
            return result

        if path is None:
            return value()
        _, save, load = KINDS[kind]
        return cached(path, value, save, load, write=self.writable)

    def has(self, stage: str, key: str, kind: str) -> bool:
        """Whether the stage is on disk with its checksum (its output is not loaded)."""
        path = self._path(stage, key, kind)
        return path is not None and verified(path)

    def offer(self, stage: str, key: str, kind: str, value: Any) -> None:
        """A worker's output: saved now when the cache is writable (a killed run keeps it), else
        held until the stage is asked for."""
        self._offered[(stage, key)] = value
        if self.writable:
            self.get(stage, key, kind, lambda: value)
            self._offered.pop((stage, key), None)  # on disk now (or already was)

    def arrays(self, stage: str, step: Stage[Arrays]) -> Arrays:
        return self.get(stage, step.key, "arrays", step.compute)

    def json(self, stage: str, step: Stage[Any]) -> Any:
        return self.get(stage, step.key, "json", step.compute)


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


class MixingTrack:
    """The part of a track that chooses λ on split A and pretrains on public data drawn by λ: the
    image and the text track alike (WarmSyn mixes nothing)."""

    def __init__(
        self,
        spec: MixingSpec,
        tasks: tuple[str, ...],
        problems: Callable[[str], tuple[Problem, Problem]],
        data_key: str,
        split_key: str,
        secure: bool,
        user_level: bool = False,
        loss_bound: float = LOSS_BOUND,
        public: Callable[[str], Problem] | None = None,
    ) -> None:
        """Every job runs each of ``tasks``, mixing on ``problems(task)``: split A (what DP-MixMin
        sees) and all the training data (the non-private upper bound's). ``data_key`` names the
        data (it keys the pretraining stages and their streams); ``split_key`` names split A too
        (it keys the mixtures and names their noise streams). ``public(task)``: the same proxies'
        problem on public data, where a spec's ``mix_tuning`` rehearses DP-MixMin's C and η."""
        self.spec, self.tasks, self.problems, self.secure = spec, tasks, problems, secure
        self.public = public
        self.data_key, self.split_key = data_key, split_key
        self.user_level, self.loss_bound = user_level, loss_bound
        self.delta = spec.delta
        self.sequential = spec.composition == "sequential"
        self.finetune_kind = "json"
        self.model_ids: dict[str, str] = {}  # what names a non-default model in the pretraining keys
        self._problems: dict[str, tuple[Problem, Problem]] = {}

    def mixing_phases(self, epsilon: float) -> list[accounting.GaussianPhase]:
        """The DP phases the spec's private methods run on split A for a release at ``epsilon``."""
        phases = [mixing_phase(m, mix_epsilon(self.spec, epsilon), self.spec) for m in self.spec.methods]
        return [p for p in phases if p is not None]

    def calibrations(self, epsilon: float) -> list[accounting.CalibrationRequest]:
        """The private mixtures' (the finetune's are the subclass's to add)."""
        asked = [mixing_request(m, mix_epsilon(self.spec, epsilon), self.spec) for m in self.spec.methods]
        return [request for request in asked if request is not None]

    def jobs(self) -> list[Job]:
        spec = self.spec
        return [
            Job(m, eps, s, task)
            for eps in spec.epsilons
            for m in spec.methods
            for s in range(spec.seeds)
            for task in self.tasks
        ]

    def tuned(self, job: Job) -> bool:
        """Whether the job's DP-MixMin takes its C and η from a rehearsal on public data."""
        return job.method == "dpmixmin" and bool(getattr(self.spec, "mix_tuning", False))

    def rehearsal(self, job: Job, epsilon: float) -> dict[str, float]:
        """C and η rehearsed at the job's σ on the task's public problem (:func:`..tuning.rehearse`)."""
        if self.public is None:
            raise InputError("mix_tuning needs a public problem; this track has none")
        phase = present(mixing_phase(job.method, epsilon, self.spec), "DP-MixMin runs a DP phase")
        ids = {"split": self.split_key, "task": job.task, "epsilon": epsilon, "seed": job.seed}

        def noise(clip: float, learning_rate: float) -> Stream:
            return stream(self.spec.seed, "learner-tuning", **ids, clip=clip, learning_rate=learning_rate)

        public = self.public(job.task)
        rows = len(self.mixing_problems(job.task)[0].logp)
        if public.n > rows:  # as many rows as split A: the noise weighs on the mean as it will there
            draw = stream(self.spec.seed, "learner-tuning", **ids, rows=rows).numpy()
            public = public.subset(np.sort(draw.permutation(public.n)[:rows]))
        chosen = rehearse(public, phase.noise_multiplier, phase.steps, 1.0, noise)
        return {"clip": chosen["clip"], "learning_rate": chosen["learning_rate"], "public_n": float(public.n)}

    def mixing_problems(self, task: str) -> tuple[Problem, Problem]:
        if task not in self._problems:
            self._problems[task] = self.problems(task)
        return self._problems[task]

    def mixture(self, job: Job) -> Stage[Mixture]:
        spec = self.spec
        private = job.method in PRIVATE_METHODS
        eps_mix = mix_epsilon(spec, job.epsilon)
        key = content_key(
            split=self.split_key,
            task=job.task,
            method=job.method,
            seed=job.seed,
            delta=spec.delta,
            epsilon=eps_mix if private else None,
            steps=spec.mix_steps,
            clip=spec.mix_clip,
            lr=spec.mix_learning_rate,
            candidates=spec.search_candidates,
            secure=self.secure and private,
            **({"tuning": "rehearsal"} if self.tuned(job) else {}),
        )

        def compute() -> Mixture:
            split_a, full = self.mixing_problems(job.task)
            ids = {"split": self.split_key, "task": job.task}
            settings = self.rehearsal(job, eps_mix) if self.tuned(job) else None
            return choose(
                job.method,
                split_a,
                full,
                eps_mix,
                spec,
                job.seed,
                ids,
                self.secure,
                self.user_level,
                self.loss_bound,
                settings,
            )

        return Stage(key, compute)

    def pretrain_on(
        self,
        job: Job,
        mixture: Mixture,
        examples: int,
        epochs: int,
        learning_rate: float,
        train: Callable[[list[float] | None, Key], Arrays],
    ) -> Stage[Arrays] | None:
        """Pretraining on ``examples`` public items drawn by λ, or (method ``warm``) from the public
        in-distribution slice; None when the job has neither. Its streams are named by its key."""
        weights = None if mixture.weights is None else [float(w) for w in mixture.weights]
        if weights is None and job.method != "warm":
            return None
        key = content_key(
            data=self.data_key,
            weights="warm" if weights is None else [round(w, 12) for w in weights],
            seed=job.seed,
            n=examples,
            epochs=epochs,
            lr=learning_rate,
            **self.model_ids,
            **device.key_ids(self.spec.device),
        )
        return Stage(key, lambda: train(weights, Key(self.spec.seed).child(pretrain=key)))

    def finetune_key(self, job: Job) -> Key:
        """The key the private finetune of ``job`` (and its rehearsals, as children) draws from."""
        return Key(self.spec.seed).child(task=job.task, method=job.method, epsilon=job.epsilon, seed=job.seed)


def _as_dict(choice: Stage[Mixture]) -> Stage[dict[str, Any]]:
    """The mixture stage as its JSON form (what the cache stores)."""
    return Stage(choice.key, lambda: choice.compute().to_dict())


def mixture_draw(
    sizes: Sequence[int], weights: Sequence[float], count: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """``count`` public items drawn by λ: per source, how many (multinomial in λ), then which
    (uniform within the source). Returns each source's picked indices."""
    counts = rng.multinomial(count, np.asarray(weights) / np.sum(weights))
    return [rng.integers(size, size=c) for size, c in zip(sizes, counts, strict=True)]


#: the stream identifier each rehearsed setting adds to the finetune's key.
REHEARSAL_IDS = {"learning_rate": "rehearsal_lr", "epochs": "rehearsal_epochs"}


@dataclass(frozen=True)
class Rehearsal:
    """How a track scores a rehearsed finetune on public data, and where the scores are recorded."""

    label: str  # the choice's key for the list of scored candidates
    score: str  # each candidate's score name
    higher_is_better: bool


def choose_by_rehearsal(
    candidates: Sequence[dict[str, float]],
    rehearse: Callable[[dict[str, float], Key], float],
    rehearsal: Rehearsal,
    stage: Key,
) -> dict[str, Any]:
    """The finetune's settings, by one rule for every method, at no privacy cost.

    Each candidate runs the same DP finetune (same ε, δ, clip, prior, q, T and σ) on public data and
    is scored on other public data; the test set is never looked at. Rehearsals draw from children
    of ``stage`` named by the candidate, never from the private finetune's streams. A single
    candidate is taken as it is.
    """
    if len(candidates) == 1:
        return dict(candidates[0])
    scores = [rehearse(c, stage.child(**{REHEARSAL_IDS[name]: value for name, value in c.items()})) for c in candidates]
    pick = (max if rehearsal.higher_is_better else min)(range(len(scores)), key=lambda i: scores[i])
    return {
        **candidates[pick],
        rehearsal.label: [{**c, rehearsal.score: s} for c, s in zip(candidates, scores, strict=True)],
    }
