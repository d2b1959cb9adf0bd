"""The image track of the pipeline (docs/concepts/pipeline.md): what is specific to the MNIST worlds.

public sources → one proxy per source → problem file on split A → λ per method → pretrain a
small CNN on public images drawn by λ → DP finetune (Opacus, Poisson) → per-digit AUC on the
test set. The stages themselves, their cache and the privacy composition are :mod:`.stages`'.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from .. import accounting
from ..base.backend import Backend
from ..base.cache import content_key
from ..base.errors import require
from ..base.randomness import Key, stream
from ..data import registry
from ..data.proxies import DIGIT_TASKS, ProxySpec, accuracies, probabilities, task_log_likelihood, train_proxies
from ..data.shift import bad_sources
from ..data.sources import PublicSource
from ..models import DEFAULT_NETWORK, cnn, device
from ..problem import Problem
from .methods import Mixture
from .spec import PipelineSpec
from .stages import (
    Arrays,
    Job,
    MixingTrack,
    Rehearsal,
    Run,
    Stage,
    StageCache,
    choose_by_rehearsal,
    mixture_draw,
    preflight,
    run_stages,
)


@dataclass(frozen=True)
class ImageTrackData:
    """The data every stage reads, already cut to the spec's fractions and split into A and B."""

    sources: tuple[PublicSource, ...]
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    split_a: np.ndarray  # rows of the training set DP-MixMin sees
    split_b: np.ndarray  # the disjoint rest, for finetuning under parallel composition
    validation: PublicSource  # clean public images drawn like the sensitive data: choices here are free


def build_world(spec: PipelineSpec) -> ImageTrackData:
    """Load and cut the data; every empty source or split is an input error, raised before any output."""
    public, sensitive = registry.world_sources(spec.world, spec.seed, synthetic=spec.synthetic_source)
    public = [*public, *bad_sources(public, spec.permuted_sources, spec.distractor_sources, spec.seed)]
    sources = []
    for source in public:
        keep = round(spec.public_fraction * len(source.labels))
        require(keep >= 1, f"public source {source.name} has no examples at public_fraction = {spec.public_fraction:g}")
        sources.append(PublicSource(source.name, source.images[:keep], source.labels[:keep]))
    n = round(spec.sensitive_fraction * len(sensitive.train_labels))
    size_a = round(spec.rho * n)
    require(size_a >= 1, f"split A would be empty: rho = {spec.rho:g} of {n} training examples")
    require(size_a < n, f"split B would be empty: rho = {spec.rho:g} of {n} training examples")
    order = (
        stream(spec.seed, "pipeline-split", world=registry.identity(spec.world), rho=spec.rho, n=n)
        .numpy()
        .permutation(n)
    )
    return ImageTrackData(
        tuple(sources),
        sensitive.train_images[:n],
        sensitive.train_labels[:n],
        sensitive.test_images,
        sensitive.test_labels,
        np.sort(order[:size_a]),
        np.sort(order[size_a:]),
        registry.world_validation(spec.world, spec.seed),
    )


def world_key(spec: PipelineSpec) -> str:
    """The content key of the cut data: every stage of the run hashes it."""
    return content_key(
        seed=spec.seed,
        public_fraction=spec.public_fraction,
        sensitive_fraction=spec.sensitive_fraction,
        **({} if registry.identity(spec.world) == "mnist-labels" else {"world": registry.identity(spec.world)}),
        **({"synthetic": True} if spec.synthetic_source else {}),
        **({"permuted": spec.permuted_sources} if spec.permuted_sources else {}),
        **({"distractors": spec.distractor_sources} if spec.distractor_sources else {}),
    )


def _images(
    world: ImageTrackData, weights: list[float] | None, examples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``examples`` public images drawn by λ, or (``weights`` None) from the half of the public
    validation slice that the finetune rehearsals train on (the other half, which scores them,
    stays unseen)."""
    if weights is None:
        pick = rng.integers(len(world.validation.labels) // 2, size=examples)
        return world.validation.images[pick], world.validation.labels[pick]
    picks = mixture_draw([len(s.labels) for s in world.sources], weights, examples, rng)
    return (
        np.concatenate([s.images[p] for s, p in zip(world.sources, picks, strict=True)]),
        np.concatenate([s.labels[p] for s, p in zip(world.sources, picks, strict=True)]),
    )


#: the image rehearsal: macro AUC on the validation slice's other half, higher is better.
REHEARSAL = Rehearsal("validation_macro_auc", "macro_auc", higher_is_better=True)


class ImageTrack(MixingTrack):
    """The CNN on an image world: Opacus DP-SGD per example, scored by per-digit AUC."""

    def __init__(
        self,
        spec: PipelineSpec,
        world: ImageTrackData,
        problems: Callable[[str], tuple[Problem, Problem]],
        secure: bool,
        public: Callable[[str], Problem] | None = None,
    ) -> None:
        tasks = DIGIT_TASKS if spec.protocol == "per_task" else ("multiclass",)
        super().__init__(
            spec, tasks, problems, data_key=world_key(spec), split_key=split_key(spec), secure=secure, public=public
        )
        self.image_spec, self.world = spec, world
        self.finetune_kind = "finetuned"  # each run's model is kept with its scores, and written
        self.network = spec.factory  # the factory itself: it travels with the track to the workers
        self.model_ids = {} if spec.network == DEFAULT_NETWORK else {"network": spec.network}
        rows = np.arange(len(world.train_labels)) if self.sequential else world.split_b
        if spec.finetune_rows is not None:  # the first rows: the sensitive set is in random order
            require(
                spec.finetune_rows <= len(rows),
                f"finetune_rows = {spec.finetune_rows}, but the finetune has {len(rows)} rows",
            )
            rows = rows[: spec.finetune_rows]
        self.rows = rows

    def batches(self) -> int:
        return cnn.batches_per_epoch(len(self.rows), self.image_spec.finetune_batch)

    def calibrate(self, epsilon: float, prior: tuple[accounting.GaussianPhase, ...]) -> None:
        for epochs in {e for _, e in self.image_spec.finetune_grid}:
            cnn.finetune_sigma(epsilon, self.delta, self.batches(), epochs, prior)

    def pretrain(self, job: Job, mixture: Mixture) -> Stage[Arrays] | None:
        spec = self.image_spec

        def train(weights: list[float] | None, stage: Key) -> Arrays:
            images, labels = _images(
                self.world, weights, spec.pretrain_examples, stage.stream("pretrain-sample").numpy()
            )
            model = cnn.pretrain(
                images,
                labels,
                spec.pretrain_epochs,
                spec.pretrain_learning_rate,
                stage,
                device=spec.device,
                network=self.network,
            )
            return cnn.state_arrays(model)

        return self.pretrain_on(
            job, mixture, spec.pretrain_examples, spec.pretrain_epochs, spec.pretrain_learning_rate, train
        )

    def finetune(
        self, job: Job, start: Arrays | None, start_key: str | None, prior: tuple[accounting.GaussianPhase, ...]
    ) -> Stage[dict[str, Any]]:
        spec, world, grid = self.image_spec, self.world, self.image_spec.finetune_grid
        key = content_key(
            pretrain=start_key,
            task=job.task,
            **({} if job.task == "multiclass" else {"head": "binary, from the pretrained head"}),
            data=self.data_key,
            rho=spec.rho,
            composition=spec.composition,
            epsilon=job.epsilon,
            delta=spec.delta,
            prior=[asdict(p) for p in prior],
            seed=job.seed,
            **({"epochs": grid[0][1], "lr": grid[0][0]} if len(grid) == 1 else {"grid": grid}),
            batch=spec.finetune_batch,
            clip=spec.finetune_clip,
            **({"rows": spec.finetune_rows} if spec.finetune_rows is not None else {}),
            secure=self.secure,
            **self.model_ids,
            **device.key_ids(spec.device),
        )
        stage = self.finetune_key(job)
        task = job.task
        target = self.target(task)

        def rehearse(candidate: dict[str, float], rehearsal: Key) -> float:
            """The same DP finetune (ε, δ, clip, prior, batches per epoch: the same q, T and σ) on
            half the public validation slice, scored by the task's AUC (macro for multiclass) on
            the other half."""
            half = len(world.validation.labels) // 2
            batch = max(1, round(spec.finetune_batch * half / len(self.rows)))
            tuned = cnn.dp_finetune(
                cnn.from_arrays(start, rehearsal, task, self.network),
                world.validation.images[:half],
                target(world.validation.labels[:half]),
                epsilon=job.epsilon,
                delta=spec.delta,
                epochs=int(candidate["epochs"]),
                batch=batch,
                learning_rate=candidate["learning_rate"],
                clip=spec.finetune_clip,
                key=rehearsal,
                prior=prior,
                device=spec.device,
            )
            metrics = tuned.scored(world.validation.images[half:], world.validation.labels[half:], task)["metrics"]
            return metrics["macro_auc" if task == "multiclass" else "auc"]

        def compute() -> dict[str, Any]:
            candidates = [{"learning_rate": lr, "epochs": epochs} for lr, epochs in grid]
            choice = choose_by_rehearsal(candidates, rehearse, REHEARSAL, stage)
            tuned = self.dp_finetune(job, start, choice, prior)
            scored = tuned.scored(world.test_images, world.test_labels, task)
            return {**scored, "finetune_choice": choice, "model": tuned.weights()}

        return Stage(key, compute)

    @staticmethod
    def target(task: str) -> Callable[[np.ndarray], np.ndarray]:
        """The finetune's labels: the digit, or (per task) whether it is the task's digit."""
        return lambda labels: labels if task == "multiclass" else cnn.task_labels(labels, task)

    def dp_finetune(
        self,
        job: Job,
        start: Arrays | None,
        choice: dict[str, Any],
        prior: tuple[accounting.GaussianPhase, ...],
        on_private: Callable[[Any], None] | None = None,
    ) -> cnn.Finetuned:
        """The private finetune of ``job`` from ``start`` with the chosen learning rate and epochs,
        on the track's finetuning rows; its noise and batches from the job's key, or from the OS
        CSPRNG when the track is secure (a model release hooks its canaries in ``on_private``)."""
        spec, world, stage = self.image_spec, self.world, self.finetune_key(job)
        return cnn.dp_finetune(
            cnn.from_arrays(start, stage, job.task, self.network),
            world.train_images[self.rows],
            self.target(job.task)(world.train_labels[self.rows]),
            epsilon=job.epsilon,
            delta=spec.delta,
            epochs=choice["epochs"],
            batch=spec.finetune_batch,
            learning_rate=choice["learning_rate"],
            clip=spec.finetune_clip,
            key=None if self.secure else stage,
            prior=prior,
            device=spec.device,
            on_private=on_private,
        )


def split_key(spec: PipelineSpec) -> str:
    """The content key of split A's problems: the data, ρ and the proxies."""
    return content_key(data=world_key(spec), rho=spec.rho, **spec.proxy_spec.ids)


def proxies_stage(spec: PipelineSpec, world: ImageTrackData, progress: bool) -> Stage[Arrays]:
    """Every source's proxy, trained once: its class probabilities on the sensitive training set
    ("train", (k, n, 10)) and on the public validation slice ("validation"), its accuracy there
    and its epochs."""
    proxy = spec.proxy_spec

    def compute() -> Arrays:
        show = {"disable": not progress, "file": sys.stderr}
        sources = list(tqdm(world.sources, desc=f"proxies ({proxy.label})", unit="source", **show))
        models = train_proxies(sources, proxy, world.validation, Key(spec.seed).child(proxies=world_key(spec)))
        validation = probabilities(models, world.validation.images)
        return {
            "train": probabilities(models, world.train_images),
            "validation": validation,
            "validation_accuracy": accuracies(validation, world.validation.labels),
            "epochs": np.array([m.epochs or 0 for m in models], dtype=np.int64),
        }

    return Stage(content_key(data=world_key(spec), **proxy.ids, arrays="train+validation"), compute)


@dataclass(frozen=True)
class ProxyReport:
    """What a report says about the proxies: their kind, and per source its public validation
    accuracy and (CNN) training epochs."""

    spec: ProxySpec
    sources: tuple[str, ...]
    accuracy: np.ndarray
    epochs: np.ndarray


def proxy_report(spec: PipelineSpec, world: ImageTrackData, cache_root: Path) -> ProxyReport:
    """The run's proxies, from its stage cache (trained if no stage needed them)."""
    arrays = StageCache(cache_root, registry.content(spec.world)).arrays(
        "proxies", proxies_stage(spec, world, progress=False)
    )
    names = tuple(s.name for s in world.sources)
    return ProxyReport(spec.proxy_spec, names, arrays["validation_accuracy"], arrays["epochs"])


def image_track(
    spec: PipelineSpec, world: ImageTrackData, cache: StageCache, progress: bool, secure: bool
) -> ImageTrack:
    """The track; its proxies' probabilities and split A's problem per task are cached stages of
    their own, computed when the first mixture needs them."""
    names = tuple(s.name for s in world.sources)

    def problems(task: str) -> tuple[Problem, Problem]:
        probs = cache.arrays("proxies", proxies_stage(spec, world, progress))["train"]

        def problem(rows: np.ndarray, part: str) -> Problem:
            return Problem(
                task_log_likelihood(probs[:, rows], world.train_labels[rows], task), names, task=f"{task} ({part})"
            )

        split_a = cache.get(
            "problem",
            content_key(split=split_key(spec), task=task),
            "problem",
            lambda: problem(world.split_a, "split A"),
        )
        return split_a, problem(np.arange(len(world.train_labels)), "all training data")

    def public(task: str) -> Problem:
        probs = cache.arrays("proxies", proxies_stage(spec, world, progress))["validation"]
        logp = task_log_likelihood(probs, world.validation.labels, task)
        return Problem(logp, names, task=f"{task} (public validation)")

    track = ImageTrack(spec, world, problems, secure, public)
    for task in track.tasks:  # before anything trains: a task the held-out labels cannot score
        cnn.require_scorable(world.test_labels, task)
    return track


def run_pipeline(
    spec: PipelineSpec,
    out: Path,
    *,
    progress: bool = True,
    world: ImageTrackData | None = None,
    secure: bool = False,
    cache_root: Path | None = None,
    backend: Backend | None = None,
) -> list[Run]:
    """Every (method, ε, seed) of the spec (and task, per task): one run each with metrics, λ and
    accounting. Stages are cached under ``cache_root`` (default ``out/cache``; rows share one);
    ``backend`` computes the seeds side by side (the same results).

    ``secure`` draws every private noise and Poisson batch from the OS CSPRNG: the run is then
    not reproducible, and its cached stages are kept apart from the seeded ones.
    """
    spec = device.resolved(spec)
    world = world or build_world(spec)
    cache = StageCache(cache_root or out / "cache", registry.content(spec.world))
    track = image_track(spec, world, cache, progress, secure)
    preflight(track, spec.epsilons)  # before the proxies: an unreachable ε writes nothing
    return run_stages(track, cache, progress, secure, backend)
