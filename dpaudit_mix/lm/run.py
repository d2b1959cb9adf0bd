"""The text pipeline (DESIGN §13): the image pipeline's stages with users as the privacy unit.

n-gram proxies → user-level problem on split A (a fraction ρ of the training speakers) → λ per
method (DP-MixMin at user level) → pretrain the character GRU on public windows sampled by λ →
user-level DP-SGD on the other speakers (parallel) or on all of them after the mixture
(sequential, budgets composed) → perplexity on the held-out speakers. Stages are cached by
content hash like the image pipeline's (:class:`..pipeline.run.StageCache`).
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from .. import accounting
from ..atomic import write_json
from ..cache import content_key, load_json, load_npz, save_npz
from ..data import registry
from ..data.ngram import V
from ..data.text import speeches, text_world
from ..errors import require
from ..pipeline.methods import choose
from ..pipeline.model import state_arrays
from ..pipeline.run import StageCache, mixture_json, phases_epsilon, release_privacy
from ..problem import Problem
from ..randomness import Key, stream
from . import model as lm
from .spec import TextPipelineSpec
from .userdp import UserLevelSGD, train

#: B for random search at user level: a user's mean per-character loss, clipped at the loss of
#: the uniform character model (a public constant; mixtures of the proxies rarely do worse).
TEXT_LOSS_BOUND = float(np.log(V - 1))


@dataclass(frozen=True)
class TextWorld:
    """The data every stage reads; users are dense ids 0..U−1 of the training speakers."""

    sources: tuple[str, ...]
    source_windows: tuple[np.ndarray, ...]  # every window of every public source
    problem: Problem  # logp of every training speech under every proxy, with users
    user_windows: tuple[np.ndarray, ...]  # every window of each training user's speeches
    test_windows: np.ndarray  # every window of the held-out speakers' speeches
    split_a: np.ndarray  # the users DP-MixMin sees
    split_b: np.ndarray  # the other users: the finetune's under parallel composition
    rehearsal_users: tuple[np.ndarray, ...]  # public speakers' windows, per speaker: rehearsals train here
    rehearsal_test: np.ndarray  # the genre's other speakers' windows: rehearsals are scored here


def build_text_world(spec: TextPipelineSpec) -> TextWorld:
    sources, sensitive, test = text_world(spec.seed)
    problem = registry.build(registry.TEXT_WORLD, registry.TEXT_TASK, seed=spec.seed)
    users = problem.users
    count = int(users.max()) + 1
    size_a = round(spec.rho * count)
    require(1 <= size_a < count, f"rho = {spec.rho:g} of {count} training speakers leaves a split empty")
    order = stream(spec.seed, "pipeline-split", world=registry.TEXT_WORLD, rho=spec.rho, n=count).numpy().permutation(count)
    texts = np.array(sensitive.texts, dtype=object)
    rehearsal_users, rehearsal_test = _rehearsal(spec.rehearsal_genre, spec.seed)
    return TextWorld(tuple(s.name for s in sources), tuple(lm.all_windows(s.texts) for s in sources), problem,
                     tuple(lm.all_windows(list(texts[users == u])) for u in range(count)),
                     lm.all_windows(test.texts), np.sort(order[:size_a]), np.sort(order[size_a:]),
                     rehearsal_users, rehearsal_test)


def _rehearsal(genre: str, seed: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """A public genre's speakers split in halves: per-speaker windows to train on, and the other
    half's windows to score (public data: choosing on it spends no privacy)."""
    by_speaker: dict[str, list[str]] = {}
    for speaker, text in speeches(genre):
        by_speaker.setdefault(speaker, []).append(text)
    names = sorted(by_speaker)
    order = stream(seed, "rehearsal-split", genre=genre).numpy().permutation(len(names))
    half = len(names) // 2
    return (tuple(lm.all_windows(by_speaker[names[i]]) for i in order[:half]),
            lm.all_windows([t for i in order[half:] for t in by_speaker[names[i]]]))


def _finetune_users(spec: TextPipelineSpec, world: TextWorld) -> np.ndarray:
    return np.arange(len(world.user_windows)) if spec.composition == "sequential" else world.split_b


@lru_cache(maxsize=None)
def _calibrate(epsilon: float, delta: float, sample_rate: float, steps: int,
               prior: tuple[accounting.GaussianPhase, ...]) -> float:
    """σ per setting, once: PLD calibration under Poisson sampling takes seconds, and every
    method and seed of a run asks for the same few."""
    return accounting.calibrate(epsilon, delta, sample_rate, steps, prior=prior)


def _finetune_sigma(spec: TextPipelineSpec, world: TextWorld, epsilon: float,
                    prior: tuple[accounting.GaussianPhase, ...]) -> tuple[float, float]:
    """(q, σ) of the user-level finetune: q = expected users / users, σ so that it (after
    ``prior`` on the same users) spends ``epsilon``."""
    users = len(_finetune_users(spec, world))
    q = min(1.0, spec.finetune_users / users)
    return q, _calibrate(epsilon, spec.delta, q, spec.finetune_steps, prior)


def _mix_epsilon(spec: TextPipelineSpec, epsilon: float) -> float:
    return spec.mix_share * epsilon if spec.composition == "sequential" else epsilon


def preflight(spec: TextPipelineSpec, world: TextWorld) -> None:
    """Calibrate every σ the run needs, so an unreachable ε fails before anything is written."""
    for eps in spec.epsilons:
        prior = ()
        if spec.composition == "sequential":
            prior = (accounting.GaussianPhase(_calibrate(_mix_epsilon(spec, eps), spec.delta, 1.0, spec.mix_steps, ()),
                                              1.0, spec.mix_steps),)
        _finetune_sigma(spec, world, eps, prior)


def _pretrain_windows(world: TextWorld, weights: list[float], count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` public windows: a source drawn by λ, then one of its windows uniformly."""
    per_source = rng.multinomial(count, np.asarray(weights) / np.sum(weights))
    return np.concatenate([w[rng.integers(len(w), size=c)] for w, c in zip(world.source_windows, per_source)])


def _rows(problem: Problem, users: np.ndarray) -> Problem:
    return problem.subset(np.flatnonzero(np.isin(problem.users, users)))


def run_text_pipeline(spec: TextPipelineSpec, out: Path, world: TextWorld | None = None, progress: bool = True,
                      secure: bool = False) -> list[dict[str, Any]]:
    """Every (method, ε, seed): one record with test perplexity, λ and accounting."""
    world = world or build_text_world(spec)
    preflight(spec, world)
    cache = StageCache(out / "cache")
    show = {"disable": not progress, "file": sys.stderr}
    data_key = content_key(world=registry.TEXT_WORLD, seed=spec.seed, rho=spec.rho)
    split_a = _rows(world.problem, world.split_a)
    jobs = [(m, eps, s) for eps in spec.epsilons for m in spec.methods for s in range(spec.seeds)]

    mixtures: dict[tuple[str, float, int], dict[str, Any]] = {}
    for method, eps, seed in tqdm(jobs, desc="mixtures", unit="λ", **show):
        private = method in ("dpmixmin", "random_search")
        key = content_key(data=data_key, method=method, seed=seed, delta=spec.delta,
                          epsilon=_mix_epsilon(spec, eps) if private else None, steps=spec.mix_steps,
                          clip=spec.mix_clip, lr=spec.mix_learning_rate, candidates=spec.search_candidates,
                          secure=secure and private)

        def mix(method: str = method, eps: float = eps, seed: int = seed) -> dict[str, Any]:
            mixture = choose(method, split_a, world.problem, _mix_epsilon(spec, eps), spec, seed, secure,
                             user_level=True, loss_bound=TEXT_LOSS_BOUND)
            return mixture_json(mixture)

        mixtures[(method, eps, seed)] = cache.get("mixture", key, "json", mix, write_json, load_json)

    pretrained: dict[tuple[str, float, int], str | None] = {}
    pretrained_arrays: dict[str, dict[str, np.ndarray]] = {}  # held, not re-read: the cache may be unwritable
    for method, eps, seed in tqdm(jobs, desc="pretrain", unit="model", **show):
        weights = mixtures[(method, eps, seed)]["weights"]
        if weights is None:
            pretrained[(method, eps, seed)] = None
            continue
        key = content_key(data=data_key, weights=[round(w, 12) for w in weights], seed=seed,
                          n=spec.pretrain_windows, epochs=spec.pretrain_epochs, lr=spec.pretrain_learning_rate)

        def pretrain(weights: list[float] = weights, stage: Key = Key(spec.seed).child(pretrain=key)
                     ) -> dict[str, np.ndarray]:
            data = _pretrain_windows(world, weights, spec.pretrain_windows, stage.stream("pretrain-sample").numpy())
            return state_arrays(lm.pretrain(data, spec.pretrain_epochs, spec.pretrain_learning_rate, stage))

        pretrained_arrays[key] = cache.get("pretrain", key, "npz", pretrain, save_npz, load_npz)
        pretrained[(method, eps, seed)] = key

    users = _finetune_users(spec, world)
    records = []
    for method, eps, seed in tqdm(jobs, desc="finetune", unit="model", **show):
        mixture = mixtures[(method, eps, seed)]
        prior = ((accounting.GaussianPhase(**mixture["phase"]),)
                 if spec.composition == "sequential" and mixture["phase"] else ())
        base = pretrained[(method, eps, seed)]
        key = content_key(pretrain=base, data=data_key, composition=spec.composition, epsilon=eps, delta=spec.delta,
                          prior=[asdict(p) for p in prior], seed=seed, steps=spec.finetune_steps,
                          users=spec.finetune_users, clip=spec.finetune_clip, windows=spec.windows_per_user,
                          secure=secure, **({"grid": spec.finetune_learning_rates, "rehearsal": spec.rehearsal_genre}
                                            if spec.finetune_learning_rates else {"lr": spec.finetune_learning_rate}))

        def finetune(base: str | None = base, prior: tuple = prior, eps: float = eps,
                     stage: Key = Key(spec.seed).child(task=registry.TEXT_TASK, method=method, epsilon=eps, seed=seed)
                     ) -> dict[str, Any]:
            arrays = None if base is None else pretrained_arrays[base]
            model = lm.from_arrays(arrays, stage)
            before = lm.perplexity(model, world.test_windows)
            q, sigma = _finetune_sigma(spec, world, eps, prior)
            choice = _choose_learning_rate(spec, world, arrays, q, sigma, stage)
            config = UserLevelSGD(q, spec.finetune_steps, sigma, spec.finetune_clip, choice["learning_rate"],
                                  spec.windows_per_user)
            train(model, [world.user_windows[u] for u in users], config, None if secure else stage)
            return {"perplexity": lm.perplexity(model, world.test_windows), "pretrained_perplexity": before,
                    "finetune_phase": asdict(config.phase), "finetune_choice": choice}

        result = cache.get("finetune", key, "json", finetune, write_json, load_json)
        finetune_phase = accounting.GaussianPhase(**result["finetune_phase"])
        records.append({"method": method, "epsilon": eps, "seed": seed, "secure": secure, **result,
                        "mixture": mixture, **release_privacy(mixture, finetune_phase,
                                                              phases_epsilon((finetune_phase,), spec.delta),
                                                              spec.delta, spec.composition == "sequential")})
    return records


def _choose_learning_rate(spec: TextPipelineSpec, world: TextWorld, arrays: dict[str, np.ndarray] | None, q: float,
                          sigma: float, stage: Key) -> dict[str, Any]:
    """The finetune's learning rate, by one rule for every method, at no privacy cost: each
    candidate runs the same user-level DP finetune (q, T, σ, C) on the public rehearsal speakers
    and is scored by perplexity on the genre's other speakers. The test set is never looked at.
    Rehearsals draw from children of ``stage``, never the private finetune's streams."""
    grid = spec.finetune_learning_rates
    if not grid:
        return {"learning_rate": spec.finetune_learning_rate}
    scores = {}
    for lr in grid:
        config = UserLevelSGD(q, spec.finetune_steps, sigma, spec.finetune_clip, lr, spec.windows_per_user)
        rehearsal = stage.child(rehearsal_lr=lr)
        model = train(lm.from_arrays(arrays, rehearsal), list(world.rehearsal_users), config, rehearsal)
        scores[lr] = lm.perplexity(model, world.rehearsal_test)
    return {"learning_rate": min(scores, key=lambda lr: scores[lr]),
            "rehearsal_perplexity": [{"learning_rate": lr, "perplexity": p} for lr, p in scores.items()]}
