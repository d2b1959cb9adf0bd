"""The DP-MixMin pipeline (DESIGN §8), stage by stage, each stage cached by content hash.

public sources → one proxy per source → problem file on split A → λ per method → pretrain a
CNN on public data sampled by λ → DP finetune (Opacus, Poisson) → evaluate on the test set.
A stage's key hashes its parameters and its inputs' keys, and its output is written atomically
under ``OUT/cache/<stage>/<key>``: a rerun (or an interrupted run) skips every finished stage.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from tqdm import tqdm

from .. import accounting
from ..atomic import write_json
from ..cache import cached, content_key, load_json, load_npz, save_npz
from ..data.proxies import class_probabilities, task_log_likelihood, train_proxy
from ..data import registry
from ..data.sources import PublicSource
from ..errors import require
from ..problem import Problem
from ..problem import load as load_problem
from ..problem import save as save_problem
from ..randomness import Key, stream
from . import model as cnn
from .methods import Mixture, choose
from .spec import PipelineSpec

T = TypeVar("T")


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
    public, sensitive = registry.world_sources(spec.world, spec.seed)
    if spec.synthetic_source:
        from ..synth.run import synthetic_source  # torch-heavy; only when asked for

        public = [*public, synthetic_source(spec.world, spec.seed)]
    sources = []
    for source in public:
        keep = round(spec.public_fraction * len(source.labels))
        require(keep >= 1, f"public source {source.name} has no examples at public_fraction = {spec.public_fraction:g}")
        sources.append(PublicSource(source.name, source.images[:keep], source.labels[:keep]))
    n = round(spec.sensitive_fraction * len(sensitive.train_labels))
    size_a = round(spec.rho * n)
    require(size_a >= 1, f"split A would be empty: rho = {spec.rho:g} of {n} training examples")
    require(size_a < n, f"split B would be empty: rho = {spec.rho:g} of {n} training examples")
    order = stream(spec.seed, "pipeline-split", world=registry.canonical(spec.world), rho=spec.rho, n=n).numpy().permutation(n)
    return World(tuple(sources), sensitive.train_images[:n], sensitive.train_labels[:n], sensitive.test_images,
                 sensitive.test_labels, np.sort(order[:size_a]), np.sort(order[size_a:]),
                 registry.world_validation(spec.world, spec.seed))


class StageCache:
    """Finished stage outputs under ``root/<stage>/<key>.<ext>`` (JSON, npz or problem files), each
    reused only if it passes its checksum (:func:`..cache.cached`)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def get(self, stage: str, key: str, ext: str, compute: Callable[[], T], save: Callable[[Path, T], None],
            load: Callable[[Path], T]) -> T:
        return cached(self.root / stage / f"{key}.{ext}", compute, save, load)


def preflight(spec: PipelineSpec, world: World) -> None:
    """Calibrate every σ the run will need, so an unreachable ε fails before anything is written."""
    sequential = spec.composition == "sequential"
    n = len(world.train_labels) if sequential else len(world.split_b)
    batches = math.ceil(n / min(spec.finetune_batch, n))  # Opacus: q = 1 / batches, batches steps per epoch
    for eps in spec.epsilons:
        eps_mix = spec.mix_share * eps if sequential else eps
        mix_steps = {"dpmixmin": spec.mix_steps, "random_search": 1}
        phases = [accounting.GaussianPhase(accounting.calibrate(eps_mix, spec.delta, 1.0, mix_steps[m]), 1.0,
                                           mix_steps[m]) for m in spec.methods if m in mix_steps]
        priors = [(p,) for p in phases] if sequential else []
        if any(m not in mix_steps for m in spec.methods) or not sequential:
            priors.append(())
        for prior in priors:
            for epochs in {e for _, e in spec.finetune_grid}:
                accounting.calibrate(eps, spec.delta, 1 / batches, epochs * batches, "prv", prior=prior)


def mixture_json(mixture: Mixture) -> dict[str, Any]:
    return {"weights": None if mixture.weights is None else mixture.weights.tolist(),
            "phase": None if mixture.phase is None else asdict(mixture.phase), "releasable": mixture.releasable}


def _pretrain_sample(world: World, weights: list[float], examples: int, rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``examples`` public images: a source drawn by λ, then an image of that source uniformly."""
    counts = rng.multinomial(examples, np.asarray(weights) / np.sum(weights))
    images, labels = [], []
    for source, count in zip(world.sources, counts):
        pick = rng.integers(len(source.labels), size=count)
        images.append(source.images[pick])
        labels.append(source.labels[pick])
    return np.concatenate(images), np.concatenate(labels)


def _warm_sample(world: World, examples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``examples`` images drawn from the half of the public validation slice that the finetune
    rehearsals train on (the other half, which scores them, stays unseen)."""
    half = len(world.validation.labels) // 2
    pick = rng.integers(half, size=examples)
    return world.validation.images[pick], world.validation.labels[pick]


def run_pipeline(spec: PipelineSpec, out: Path, progress: bool = True, world: World | None = None,
                 secure: bool = False) -> list[dict[str, Any]]:
    """Every (method, ε, seed) of the spec: one record each with metrics, λ and accounting.

    ``secure`` draws every private noise and Poisson batch from the OS CSPRNG: the run is then
    not reproducible, and its cached stages are kept apart from the seeded ones.
    """
    world = world or build_world(spec)
    preflight(spec, world)
    cache = StageCache(out / "cache")
    show = {"disable": not progress, "file": sys.stderr}
    data_key = content_key(seed=spec.seed, public_fraction=spec.public_fraction, sensitive_fraction=spec.sensitive_fraction,
                    **({} if registry.canonical(spec.world) == "mnist-labels" else {"world": spec.world}),
                    **({"synthetic": True} if spec.synthetic_source else {}))

    def proxies() -> dict[str, np.ndarray]:
        models = [train_proxy(s) for s in tqdm(world.sources, desc="proxies", unit="source", **show)]
        return {"train": np.stack([class_probabilities(m, world.train_images) for m in models])}

    probs = cache.get("proxies", data_key, "npz", proxies, save_npz, load_npz)["train"]
    names = tuple(s.name for s in world.sources)

    def multiclass(rows: np.ndarray, task: str) -> Problem:
        logp = task_log_likelihood(probs[:, rows], world.train_labels[rows], "multiclass")
        return Problem(logp, names, task=task)

    problem_key = content_key(data=data_key, rho=spec.rho)
    split_a = cache.get("problem", problem_key, "npz", lambda: multiclass(world.split_a, "multiclass (split A)"),
                        lambda path, problem: save_problem(problem, path), load_problem)
    full = multiclass(np.arange(len(world.train_labels)), "multiclass (all training data)")

    sequential = spec.composition == "sequential"
    jobs = [(m, eps, s) for eps in spec.epsilons for m in spec.methods for s in range(spec.seeds)]
    mixtures: dict[tuple[str, float, int], dict[str, Any]] = {}
    for method, eps, seed in tqdm(jobs, desc="mixtures", unit="λ", **show):
        eps_mix = spec.mix_share * eps if sequential else eps
        private = method in ("dpmixmin", "random_search")
        key = content_key(problem=problem_key, method=method, seed=seed, delta=spec.delta,
                   epsilon=eps_mix if private else None, steps=spec.mix_steps, clip=spec.mix_clip,
                   lr=spec.mix_learning_rate, candidates=spec.search_candidates, secure=secure and private)
        mixtures[(method, eps, seed)] = cache.get(
            "mixture", key, "json", lambda: mixture_json(choose(method, split_a, full, eps_mix, spec, seed, secure)),
            write_json, load_json)

    pretrained: dict[tuple[str, float, int], str | None] = {}
    pretrained_arrays: dict[str, dict[str, np.ndarray]] = {}  # held, not re-read: the cache may be unwritable
    for method, eps, seed in tqdm(jobs, desc="pretrain", unit="model", **show):
        weights = mixtures[(method, eps, seed)]["weights"]
        if weights is None and method != "warm":
            pretrained[(method, eps, seed)] = None
            continue
        key = content_key(data=data_key, weights="warm" if weights is None else [round(w, 12) for w in weights], seed=seed,
                   n=spec.pretrain_examples, epochs=spec.pretrain_epochs, lr=spec.pretrain_learning_rate)

        def train(weights: list[float] | None = weights, stage: Key = Key(spec.seed).child(pretrain=key)
                  ) -> dict[str, np.ndarray]:
            rng = stage.stream("pretrain-sample").numpy()
            images, labels = (_warm_sample(world, spec.pretrain_examples, rng) if weights is None
                              else _pretrain_sample(world, weights, spec.pretrain_examples, rng))
            return cnn.state_arrays(cnn.pretrain(images, labels, spec.pretrain_epochs, spec.pretrain_learning_rate,
                                                 stage))

        pretrained_arrays[key] = cache.get("pretrain", key, "npz", train, save_npz, load_npz)
        pretrained[(method, eps, seed)] = key

    finetune_rows = np.arange(len(world.train_labels)) if sequential else world.split_b
    records = []
    for method, eps, seed in tqdm(jobs, desc="finetune", unit="model", **show):
        mixture = mixtures[(method, eps, seed)]
        prior = (accounting.GaussianPhase(**mixture["phase"]),) if sequential and mixture["phase"] else ()
        base = pretrained[(method, eps, seed)]
        grid = spec.finetune_grid
        key = content_key(pretrain=base, data=data_key, rho=spec.rho, composition=spec.composition, epsilon=eps,
                   delta=spec.delta, prior=[asdict(p) for p in prior], seed=seed,
                   **({"epochs": grid[0][1], "lr": grid[0][0]} if len(grid) == 1 else {"grid": grid}),
                   batch=spec.finetune_batch, clip=spec.finetune_clip, secure=secure)

        def finetune(base: str | None = base, prior: tuple = prior, eps: float = eps,
                     stage: Key = Key(spec.seed).child(task="multiclass", method=method, epsilon=eps, seed=seed)
                     ) -> dict[str, Any]:
            arrays = None if base is None else pretrained_arrays[base]
            choice = _choose_finetune(spec, world, len(finetune_rows), arrays, eps, prior, stage)
            tuned = cnn.dp_finetune(cnn.from_arrays(arrays, stage), world.train_images[finetune_rows],
                                    world.train_labels[finetune_rows], eps, spec.delta, choice["epochs"],
                                    spec.finetune_batch, choice["learning_rate"], spec.finetune_clip,
                                    None if secure else stage, prior)
            return {"metrics": cnn.evaluate(tuned.model, world.test_images, world.test_labels),
                    "finetune_phase": asdict(accounting.GaussianPhase(tuned.noise_multiplier, tuned.sample_rate,
                                                                      tuned.steps)),
                    "finetune_opacus_epsilon": tuned.opacus_epsilon, "finetune_choice": choice}

        result = cache.get("finetune", key, "json", finetune, write_json, load_json)
        records.append({"method": method, "epsilon": eps, "seed": seed, "secure": secure, **result, "mixture": mixture,
                        **release_privacy(mixture, accounting.GaussianPhase(**result["finetune_phase"]),
                                          result["finetune_opacus_epsilon"], spec.delta, sequential)})
    return records


def _choose_finetune(spec: PipelineSpec, world: World, n_private: int, arrays: dict[str, np.ndarray] | None,
                     epsilon: float, prior: tuple[accounting.GaussianPhase, ...], stage: Key) -> dict[str, Any]:
    """The finetune's learning rate and epochs, by one rule for every method, at no privacy cost.

    Each candidate is rehearsed: the same DP finetune (ε, δ, clip, prior, and the same number of
    batches per epoch, so the same q, T and σ) on half the public validation slice, scored by
    macro AUC on the other half. The test set is never looked at. Rehearsals draw from streams of
    their own (children of ``stage``), never the private finetune's.
    """
    grid = spec.finetune_grid
    if len(grid) == 1:
        return {"learning_rate": grid[0][0], "epochs": grid[0][1]}
    v = world.validation
    half = len(v.labels) // 2
    batch = max(1, round(spec.finetune_batch * half / n_private))
    scores = {}
    for lr, epochs in grid:
        rehearsal = stage.child(rehearsal_lr=lr, rehearsal_epochs=epochs)
        tuned = cnn.dp_finetune(cnn.from_arrays(arrays, rehearsal), v.images[:half], v.labels[:half], epsilon, spec.delta,
                                epochs, batch, lr, spec.finetune_clip, rehearsal, prior)
        scores[(lr, epochs)] = cnn.evaluate(tuned.model, v.images[half:], v.labels[half:])["macro_auc"]
    lr, epochs = max(scores, key=lambda c: scores[c])
    return {"learning_rate": lr, "epochs": epochs,
            "validation_macro_auc": [{"learning_rate": c[0], "epochs": c[1], "macro_auc": a} for c, a in scores.items()]}


@lru_cache(maxsize=None)
def phases_epsilon(phases: tuple[accounting.GaussianPhase, ...], delta: float) -> float:
    """ε of ``phases`` composed (PLD), once per setting: every seed of a run asks for the same."""
    return accounting.epsilon(phases, delta)


def release_privacy(mixture: dict[str, Any], finetune: accounting.GaussianPhase, finetune_epsilon: float,
                    delta: float, sequential: bool) -> dict[str, Any]:
    """The release's total (ε, δ) per privacy unit: parallel = max over the disjoint splits,
    sequential = the mixture and the finetune composed. ``finetune_epsilon`` is the finetune's
    own ε, from the accountant that calibrated it."""
    if not mixture["releasable"]:
        return {"epsilon_total": math.inf, "delta_total": delta, "releasable": False}
    phases = (accounting.GaussianPhase(**mixture["phase"]),) if mixture["phase"] else ()
    if sequential:
        total = phases_epsilon((*phases, finetune), delta)
    else:
        costs = [(finetune_epsilon, delta)] + ([(phases_epsilon(phases, delta), delta)] if phases else [])
        total = accounting.parallel(*costs)[0]
    return {"epsilon_total": total, "delta_total": delta, "releasable": True}
