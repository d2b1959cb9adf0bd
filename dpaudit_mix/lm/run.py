"""The text track of the pipeline (docs/concepts/pipeline.md): the image track's stages with users as the
privacy unit.

n-gram proxies → user-level problem on split A (a fraction ρ of the training speakers) → λ per
method (DP-MixMin at user level) → pretrain the character GRU on public windows drawn by λ →
user-level DP-SGD on the other speakers (parallel) or on all of them after the mixture
(sequential, budgets composed) → perplexity on the held-out speakers. The stages, their cache and
the privacy composition are :mod:`..pipeline.stages`'.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import accounting
from ..base.alphabet import V
from ..base.backend import Backend
from ..base.cache import content_key
from ..base.errors import InputError, present, require
from ..base.randomness import Key, stream
from ..data import registry
from ..data.text import speeches, text_world
from ..data.text_files import TextSet
from ..data.worlds import TextDocuments
from ..models import chargru as lm
from ..models import device
from ..models.cnn import state_arrays
from ..models.userdp import UserLevelSGD, train
from ..pipeline.methods import Mixture
from ..pipeline.stages import (
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
from ..problem import Problem
from .spec import TextPipelineSpec

#: the pretraining batch every stage key before ``pretrain_batch`` existed was trained with.
DEFAULT_PRETRAIN_BATCH = 64

#: B for random search at user level: a user's mean per-character loss, clipped at the loss of
#: the uniform character model (a public constant; mixtures of the proxies rarely do worse).
TEXT_LOSS_BOUND = float(np.log(V - 1))


@dataclass(frozen=True)
class TextTrackData:
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


def build_text_world(spec: TextPipelineSpec) -> TextTrackData:
    """The embedded world's or a text manifest's data, cut into windows and split by users."""
    if registry.canonical(spec.world) == registry.TEXT_WORLD:
        sources, sensitive, test = text_world(spec.seed)
        named = [(s.name, s.texts) for s in sources]
        texts, test_texts = sensitive.texts, test.texts
        rehearsal_users, rehearsal_test = _rehearsal(speeches(spec.rehearsal_genre), spec.seed, spec.rehearsal_genre)
    else:
        files = registry.world(spec.world)
        assert isinstance(files, TextDocuments)  # the spec accepts only text worlds (registry.is_text)
        if files.test is None:
            raise InputError(f"{spec.world}: the text pipeline scores held-out users: give the manifest sensitive_test")
        named = [(name, texts.texts) for name, texts in files.source_sets]
        texts, test_texts = files.sensitive.texts, files.test.texts
        rehearsal_users, rehearsal_test = (
            ((), np.zeros((0, lm.WINDOW + 1), dtype=np.int64))
            if files.validation is None
            else _rehearsal(_by_user(files.validation), spec.seed, "validation")
        )
        require(
            files.validation is not None or not spec.finetune_learning_rates,
            f"{spec.world}: finetune_learning_rates rehearse on public in-distribution text: give the manifest "
            "a validation file (documents with users)",
        )
    problem = _dense_users(registry.build(spec.world, registry.TEXT_TASK, seed=spec.seed))
    users = present(problem.users, "the text world's problem has user ids")
    count = int(users.max()) + 1
    size_a = round(spec.rho * count)
    require(1 <= size_a < count, f"rho = {spec.rho:g} of {count} training users leaves a split empty")
    world_id = registry.identity(spec.world)
    order = stream(spec.seed, "pipeline-split", world=world_id, rho=spec.rho, n=count).numpy().permutation(count)
    by_row = np.array(texts, dtype=object)
    return TextTrackData(
        tuple(name for name, _ in named),
        tuple(lm.all_windows(list(t)) for _, t in named),
        problem,
        tuple(lm.all_windows(list(by_row[users == u])) for u in range(count)),
        lm.all_windows(list(test_texts)),
        np.sort(order[:size_a]),
        np.sort(order[size_a:]),
        rehearsal_users,
        rehearsal_test,
    )


def _dense_users(problem: Problem) -> Problem:
    """The problem with its users renumbered 0 … U − 1 in order of their ids (the embedded world's
    already are; a file's may be any integers)."""
    users = present(problem.users, "the text world's problem has user ids")
    _, dense = np.unique(users, return_inverse=True)
    return problem if np.array_equal(dense, users) else replace(problem, users=dense.astype(np.int64))


def _by_user(texts: TextSet) -> list[tuple[str, str]]:
    """(user, document) pairs of a public text set (a document without a user is its own)."""
    users = np.arange(len(texts.texts)) if texts.users is None else texts.users
    return [(str(u), t) for u, t in zip(users, texts.texts, strict=True)]


def _rehearsal(pairs: list[tuple[str, str]], seed: int, name: str) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Public (speaker, text) pairs split by speaker in halves: per-speaker windows to train on,
    and the other half's windows to score (public data: choosing on it spends no privacy)."""
    by_speaker: dict[str, list[str]] = {}
    for speaker, text in pairs:
        by_speaker.setdefault(speaker, []).append(text)
    names = sorted(by_speaker)
    order = stream(seed, "rehearsal-split", genre=name).numpy().permutation(len(names))
    half = len(names) // 2
    return (
        tuple(lm.all_windows(by_speaker[names[i]]) for i in order[:half]),
        lm.all_windows([t for i in order[half:] for t in by_speaker[names[i]]]),
    )


def _rows(problem: Problem, users: np.ndarray) -> Problem:
    return problem.subset(np.flatnonzero(np.isin(present(problem.users, "user ids"), users)))


def finetune_users(spec: TextPipelineSpec, world: TextTrackData) -> np.ndarray:
    """The users the private finetune trains on: all of them after the mixture (sequential), else split B."""
    return np.arange(len(world.user_windows)) if spec.composition == "sequential" else world.split_b


def user_counts(spec: TextPipelineSpec, world: TextTrackData) -> dict[str, int]:
    """How many users each part of the run sees (for the report)."""
    return {
        "split_a": len(world.split_a),
        "finetune": len(finetune_users(spec, world)),
        "test": len(np.unique(present(world.problem.heldout_users, "held-out user ids"))),
    }


#: the text rehearsal: perplexity on the rehearsal genre's other speakers, lower is better.
REHEARSAL = Rehearsal("rehearsal_perplexity", "perplexity", higher_is_better=False)


class TextTrack(MixingTrack):
    """The character GRU on the text world: user-level DP-SGD, scored by held-out-user perplexity."""

    def __init__(self, spec: TextPipelineSpec, world: TextTrackData, secure: bool) -> None:
        data_key = content_key(world=registry.identity(spec.world), seed=spec.seed, rho=spec.rho)
        super().__init__(
            spec,
            (registry.TEXT_TASK,),
            lambda task: (_rows(world.problem, world.split_a), world.problem),
            data_key=data_key,
            split_key=data_key,
            secure=secure,
            user_level=True,
            loss_bound=TEXT_LOSS_BOUND,
        )
        self.text_spec, self.world = spec, world
        self.users = finetune_users(spec, world)
        # what the pretraining keys name beyond the shared ones; absent at the values every stage key
        # before them was trained with (a batch of 64, a constant rate, whole windows), so those keys stay valid
        self.model_ids = {
            **({} if spec.pretrain_batch == DEFAULT_PRETRAIN_BATCH else {"batch": str(spec.pretrain_batch)}),
            **({"cooldown": repr(spec.pretrain_cooldown)} if spec.pretrain_cooldown else {}),
            **({} if spec.pretrain_length == lm.WINDOW else {"length": str(spec.pretrain_length)}),
        }
        self.finetune_kind = "finetuned"  # each run's model is kept with its perplexity, and written
        #: test perplexity per pretraining key: the ε rows that share a pretraining (uniform, λ★)
        #: score the same weights on the same windows, computed once in a process
        self.pretrained: dict[str, float] = {}

    def finetune_request(self, epsilon: float) -> accounting.CalibrationRequest:
        """The user-level finetune's calibration: q = expected users / users, T steps."""
        q = min(1.0, self.text_spec.finetune_users / len(self.users))
        return (epsilon, self.delta, q, self.text_spec.finetune_steps, accounting.DEFAULT_ACCOUNTANT)

    def sigma(self, epsilon: float, prior: tuple[accounting.GaussianPhase, ...]) -> tuple[float, float]:
        """(q, σ) of the user-level finetune: σ so that it (after ``prior`` on the same users)
        spends ``epsilon``."""
        request = self.finetune_request(epsilon)
        return request[2], accounting.calibrate(*request, prior=prior)

    def calibrations(self, epsilon: float) -> list[accounting.CalibrationRequest]:
        return [self.finetune_request(epsilon), *super().calibrations(epsilon)]

    def calibrate(self, epsilon: float, prior: tuple[accounting.GaussianPhase, ...]) -> None:
        self.sigma(epsilon, prior)

    def pretrain(self, job: Job, mixture: Mixture) -> Stage[Arrays] | None:
        spec, sources = self.text_spec, self.world.source_windows

        def train_lm(weights: list[float] | None, stage: Key) -> Arrays:
            assert weights is not None  # the text spec has no "warm" method
            picks = mixture_draw(
                [len(w) for w in sources], weights, spec.pretrain_windows, stage.stream("pretrain-sample").numpy()
            )
            data = np.concatenate([w[p] for w, p in zip(sources, picks, strict=True)])
            return state_arrays(
                lm.pretrain(
                    data,
                    spec.pretrain_epochs,
                    spec.pretrain_learning_rate,
                    stage,
                    batch=spec.pretrain_batch,
                    device=spec.device,
                    cooldown=spec.pretrain_cooldown,
                    length=spec.pretrain_length,
                )
            )

        return self.pretrain_on(
            job, mixture, spec.pretrain_windows, spec.pretrain_epochs, spec.pretrain_learning_rate, train_lm
        )

    def finetune(
        self, job: Job, start: Arrays | None, start_key: str | None, prior: tuple[accounting.GaussianPhase, ...]
    ) -> Stage[dict[str, Any]]:
        spec, world = self.text_spec, self.world
        grid = spec.finetune_learning_rates
        key = content_key(
            pretrain=start_key,
            data=self.data_key,
            composition=spec.composition,
            epsilon=job.epsilon,
            delta=spec.delta,
            prior=[asdict(p) for p in prior],
            seed=job.seed,
            steps=spec.finetune_steps,
            users=spec.finetune_users,
            clip=spec.finetune_clip,
            windows=spec.windows_per_user,
            secure=self.secure,
            **({"grid": grid, "rehearsal": spec.rehearsal_genre} if grid else {"lr": spec.finetune_learning_rate}),
            **device.key_ids(spec.device),
        )
        stage = self.finetune_key(job)

        def config(q: float, sigma: float, learning_rate: float) -> UserLevelSGD:
            return UserLevelSGD(q, spec.finetune_steps, sigma, spec.finetune_clip, learning_rate, spec.windows_per_user)

        def compute() -> dict[str, Any]:
            model = lm.from_arrays(start, stage).to(spec.device)
            if start_key is None:  # a fresh model, its weights drawn from this job's stream
                before = lm.perplexity(model, world.test_windows)
            elif start_key in self.pretrained:
                before = self.pretrained[start_key]
            else:
                before = self.pretrained[start_key] = lm.perplexity(model, world.test_windows)
            q, sigma = self.sigma(job.epsilon, prior)

            def rehearse(candidate: dict[str, float], rehearsal: Key) -> float:
                """The same user-level DP finetune (q, T, σ, C) on the public rehearsal speakers,
                scored by perplexity on the genre's other speakers."""
                tuned = train(
                    lm.from_arrays(start, rehearsal),
                    list(world.rehearsal_users),
                    config(q, sigma, candidate["learning_rate"]),
                    rehearsal,
                    device=spec.device,
                )
                return lm.perplexity(tuned, world.rehearsal_test)

            candidates = [{"learning_rate": lr} for lr in (grid or (spec.finetune_learning_rate,))]
            choice = choose_by_rehearsal(candidates, rehearse, REHEARSAL, stage)
            settings = config(q, sigma, choice["learning_rate"])
            users = [world.user_windows[u] for u in self.users]
            train(model, users, settings, None if self.secure else stage, device=spec.device)
            return {
                "perplexity": lm.perplexity(model, world.test_windows),
                "pretrained_perplexity": before,
                "finetune_phase": asdict(settings.phase),
                "finetune_choice": choice,
                "finetune_epsilon": accounting.epsilon((settings.phase,), spec.delta),
                "model": state_arrays(model),
            }

        return Stage(key, compute)


def run_text_pipeline(
    spec: TextPipelineSpec,
    out: Path,
    *,
    world: TextTrackData | None = None,
    progress: bool = True,
    secure: bool = False,
    cache: Path | None = None,
    backend: Backend | None = None,
) -> list[Run]:
    """Every (method, ε, seed): one run with test perplexity, λ and accounting; the stages are
    cached under ``cache`` (default ``out/cache``; rows of one spec share one), the seeds side by
    side on ``backend`` (the same results)."""
    spec = device.resolved(spec)
    track = TextTrack(spec, world or build_text_world(spec), secure)
    preflight(track, spec.epsilons)
    return run_stages(
        track, StageCache(cache or out / "cache", registry.content(spec.world)), progress, secure, backend
    )
