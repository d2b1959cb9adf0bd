"""The part of a track that chooses λ on split A and pretrains on public data drawn by λ."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import accounting
from ..base.cache import content_key
from ..base.errors import InputError, present
from ..base.randomness import Key
from ..models import device
from ..problem import Problem
from ..tuning import rehearse_like
from .methods import LOSS_BOUND, PRIVATE_METHODS, MixingSpec, Mixture, choose, mix_epsilon, mixing_phase, mixing_request
from .stage_cache import Arrays, Job, Stage


class MixingTrack:
    """The part of a track that chooses λ on split A and pretrains on public data drawn by λ: the
    image and the text track alike (WarmSyn mixes nothing)."""

    def __init__(
        self,
        spec: MixingSpec,
        tasks: tuple[str, ...],
        problems: Callable[[str], tuple[Problem, Problem]],
        *,
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
        """C and η rehearsed at the job's σ on the task's public problem (:func:`..tuning.rehearse_like`)."""
        if self.public is None:
            raise InputError("mix_tuning needs a public problem; this track has none")
        phase = present(mixing_phase(job.method, epsilon, self.spec), "DP-MixMin runs a DP phase")
        ids = {"split": self.split_key, "task": job.task, "epsilon": epsilon, "seed": job.seed}
        rows = len(self.mixing_problems(job.task)[0].logp)
        chosen = rehearse_like(
            self.public(job.task),
            rows,
            Key(self.spec.seed).child(**ids),
            noise_multiplier=phase.noise_multiplier,
            steps=phase.steps,
            sample_rate=1.0,
        )
        return {"clip": chosen["clip"], "learning_rate": chosen["learning_rate"], "public_n": float(chosen["public_n"])}

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
                split_a=split_a,
                full=full,
                epsilon=eps_mix,
                spec=spec,
                seed=job.seed,
                names=ids,
                secure=self.secure,
                user_level=self.user_level,
                loss_bound=self.loss_bound,
                settings=settings,
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


def mixture_draw(
    sizes: Sequence[int], weights: Sequence[float], count: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """``count`` public items drawn by λ: per source, how many (multinomial in λ), then which
    (uniform within the source). Returns each source's picked indices."""
    counts = rng.multinomial(count, np.asarray(weights) / np.sum(weights))
    return [rng.integers(size, size=c) for size, c in zip(sizes, counts, strict=True)]
