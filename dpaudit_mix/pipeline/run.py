"""The image track of the pipeline (DESIGN §8): what is specific to the MNIST worlds.

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
from ..cache import content_key
from ..data import registry
from ..data.proxies import class_probabilities, task_log_likelihood, train_proxy
from ..data.sources import PublicSource
from ..errors import require
from ..models import cnn
from ..problem import Problem
from ..problem import load as load_problem
from ..problem import save as save_problem
from ..randomness import Key, stream
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
class World:
    """The data every stage reads, already cut to the spec's fractions and split into A and B."""

    sources: tuple[PublicSource, ...]
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    split_a: np.ndarray  # rows of the training set DP-MixMin sees
    split_b: np.ndarray  # the disjoint rest, for finetuning under parallel composition
    validation: PublicSource  # clean public images drawn like the sensitive data: choices here are free


def build_world(spec: PipelineSpec) -> World:
    """Load and cut the data; every empty source or split is an input error, raised before any output."""
    public, sensitive = registry.world_sources(spec.world, spec.seed, synthetic=spec.synthetic_source)
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
        stream(spec.seed, "pipeline-split", world=registry.canonical(spec.world), rho=spec.rho, n=n)
        .numpy()
        .permutation(n)
    )
    return World(
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
        **({} if registry.canonical(spec.world) == "mnist-labels" else {"world": spec.world}),
        **({"synthetic": True} if spec.synthetic_source else {}),
    )


def _images(
    world: World, weights: list[float] | None, examples: int, rng: np.random.Generator
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
        self, spec: PipelineSpec, world: World, problems: Callable[[], tuple[Problem, Problem]], secure: bool
    ) -> None:
        super().__init__(spec, "multiclass", problems, world_key(spec), split_key(spec), secure)
        self.image_spec, self.world = spec, world
        self.rows = np.arange(len(world.train_labels)) if self.sequential else world.split_b

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
            return cnn.state_arrays(
                cnn.pretrain(images, labels, spec.pretrain_epochs, spec.pretrain_learning_rate, stage)
            )

        return self.pretrain_on(
            job, mixture, spec.pretrain_examples, spec.pretrain_epochs, spec.pretrain_learning_rate, train
        )

    def finetune(
        self, job: Job, start: Arrays | None, start_key: str | None, prior: tuple[accounting.GaussianPhase, ...]
    ) -> Stage[dict[str, Any]]:
        spec, world, grid = self.image_spec, self.world, self.image_spec.finetune_grid
        key = content_key(
            pretrain=start_key,
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
            secure=self.secure,
        )
        stage = self.finetune_key(job)

        def rehearse(candidate: dict[str, float], rehearsal: Key) -> float:
            """The same DP finetune (ε, δ, clip, prior, batches per epoch: the same q, T and σ) on
            half the public validation slice, scored by macro AUC on the other half."""
            half = len(world.validation.labels) // 2
            batch = max(1, round(spec.finetune_batch * half / len(self.rows)))
            tuned = cnn.dp_finetune(
                cnn.from_arrays(start, rehearsal),
                world.validation.images[:half],
                world.validation.labels[:half],
                job.epsilon,
                spec.delta,
                int(candidate["epochs"]),
                batch,
                candidate["learning_rate"],
                spec.finetune_clip,
                rehearsal,
                prior,
            )
            return cnn.evaluate(tuned.model, world.validation.images[half:], world.validation.labels[half:])[
                "macro_auc"
            ]

        def compute() -> dict[str, Any]:
            candidates = [{"learning_rate": lr, "epochs": epochs} for lr, epochs in grid]
            choice = choose_by_rehearsal(candidates, rehearse, REHEARSAL, stage)
            tuned = cnn.dp_finetune(
                cnn.from_arrays(start, stage),
                world.train_images[self.rows],
                world.train_labels[self.rows],
                job.epsilon,
                spec.delta,
                choice["epochs"],
                spec.finetune_batch,
                choice["learning_rate"],
                spec.finetune_clip,
                None if self.secure else stage,
                prior,
            )
            return {**tuned.scored(world.test_images, world.test_labels), "finetune_choice": choice}

        return Stage(key, compute)


def split_key(spec: PipelineSpec) -> str:
    """The content key of split A's problem."""
    return content_key(data=world_key(spec), rho=spec.rho)


def image_track(spec: PipelineSpec, world: World, cache: StageCache, progress: bool, secure: bool) -> ImageTrack:
    """The track; its proxies' probabilities and split A's problem are cached stages of their own,
    computed when the first mixture needs them."""
    data_key = world_key(spec)

    def problems() -> tuple[Problem, Problem]:
        def proxies() -> Arrays:
            show = {"disable": not progress, "file": sys.stderr}
            models = [train_proxy(s) for s in tqdm(world.sources, desc="proxies", unit="source", **show)]
            return {"train": np.stack([class_probabilities(m, world.train_images) for m in models])}

        probs = cache.arrays("proxies", Stage(data_key, proxies))["train"]
        names = tuple(s.name for s in world.sources)

        def multiclass(rows: np.ndarray, task: str) -> Problem:
            return Problem(
                task_log_likelihood(probs[:, rows], world.train_labels[rows], "multiclass"), names, task=task
            )

        split_a = cache.get(
            "problem",
            split_key(spec),
            "npz",
            lambda: multiclass(world.split_a, "multiclass (split A)"),
            lambda path, problem: save_problem(problem, path),
            load_problem,
        )
        return split_a, multiclass(np.arange(len(world.train_labels)), "multiclass (all training data)")

    return ImageTrack(spec, world, problems, secure)


def run_pipeline(
    spec: PipelineSpec, out: Path, progress: bool = True, world: World | None = None, secure: bool = False
) -> list[Run]:
    """Every (method, ε, seed) of the spec: one run each with metrics, λ and accounting.

    ``secure`` draws every private noise and Poisson batch from the OS CSPRNG: the run is then
    not reproducible, and its cached stages are kept apart from the seeded ones.
    """
    world = world or build_world(spec)
    cache = StageCache(out / "cache")
    track = image_track(spec, world, cache, progress, secure)
    preflight(track, spec.epsilons)  # before the proxies: an unreachable ε writes nothing
    return run_stages(track, cache, progress, secure)
