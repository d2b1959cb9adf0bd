"""`dpaudit-mix warmsyn`: the seed paper's ablation as a track of the stage machine.

Per seed: an EDM trained on the small public slice → a synthetic set → four warm-ups (the real
slice; synthetic; synthetic + augmentation/Cutout; the same with SAM), the pretraining stage →
for each ε, the Opacus DP finetune of every row (and of a cold start) on the whole sensitive
training set → accuracy and macro AUC on the sensitive test set. Stages are cached and held like
the pipeline's (:mod:`..pipeline.stages`), so a rerun recomputes nothing and an unwritable
cache costs time, not the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .. import accounting
from ..base.cache import content_key
from ..base.randomness import Key
from ..data import registry
from ..models import cnn, device, edm
from ..models.warmup import WarmUp, warm_up
from ..pipeline.methods import Mixture
from ..pipeline.stages import Arrays, Job, Stage, StageCache, preflight, run_stages
from . import quality
from .spec import ROWS, WarmSynSpec

#: what each warm-up row trains on, and how.
WARMUPS = {
    "warm": ("real", WarmUp()),
    "warmsyn": ("synthetic", WarmUp()),
    "augment": ("synthetic", WarmUp(augment=True)),
    "sam": ("synthetic", WarmUp(augment=True, sam=True)),
}


class WarmSynTrack:
    """Rows instead of mixing methods: nothing is mixed, the warm-up is the pretraining, and the
    finetune runs on the whole sensitive training set."""

    sequential = False
    finetune_kind = "json"

    def __init__(self, spec: WarmSynSpec, cache: StageCache) -> None:
        self.spec, self.cache, self.delta = spec, cache, spec.delta
        public = registry.world_validation(spec.world, spec.seed)
        self.real = public.images[: spec.public_size], public.labels[: spec.public_size]
        self.holdout = public.images[len(public.labels) // 2 :]  # never trains anything: the memorisation reference
        _, self.sensitive = registry.world_sources(spec.world, spec.seed)
        self.n = max(1, round(spec.sensitive_fraction * len(self.sensitive.train_labels)))
        self.base = content_key(world=registry.identity(spec.world), seed=spec.seed, public=spec.public_size)
        self.synthetic_sets: dict[int, Arrays] = {}

    def jobs(self) -> list[Job]:
        return [Job(row, eps, run) for run in range(self.spec.seeds) for eps in self.spec.epsilons for row in ROWS]

    def mixing_phases(self, epsilon: float) -> list[accounting.GaussianPhase]:
        return []

    def calibrations(self, epsilon: float) -> list[accounting.CalibrationRequest]:
        return []  # the finetune's σ is Opacus' own (:func:`cnn.finetune_sigma`)

    def calibrate(self, epsilon: float, prior: tuple[accounting.GaussianPhase, ...]) -> None:
        cnn.finetune_sigma(
            epsilon,
            self.delta,
            cnn.batches_per_epoch(self.n, self.spec.finetune_batch),
            self.spec.finetune_epochs,
            prior,
        )

    def mixture(self, job: Job) -> None:
        return None

    def edm_key(self, run: int) -> str:
        spec = self.spec
        return content_key(
            base=self.base, run=run, steps=spec.edm_steps, size=spec.synthetic_size, **device.key_ids(spec.device)
        )

    def synthetic(self, run: int) -> Arrays:
        """Seed ``run``'s synthetic set: EDM samples of the real slice, computed or loaded once."""
        if run not in self.synthetic_sets:

            def synthesise() -> Arrays:
                stage = Key(self.spec.seed).child(warmsyn_seed=run)
                net = edm.train(*self.real, edm.TrainConfig(steps=self.spec.edm_steps), stage, self.spec.device)
                labels = np.arange(self.spec.synthetic_size) % edm.CLASSES
                return {"images": edm.sample(net, labels, stage), "labels": labels}

            self.synthetic_sets[run] = self.cache.arrays("synthetic", Stage(self.edm_key(run), synthesise))
        return self.synthetic_sets[run]

    def pretrain(self, job: Job, mixture: Mixture) -> Stage[Arrays] | None:
        if job.method not in WARMUPS:
            return None  # the cold start
        spec, run = self.spec, job.seed
        source, config = WARMUPS[job.method]
        key = content_key(
            edm=self.edm_key(run) if source == "synthetic" else self.base,
            run=run,
            source=source,
            steps=spec.warmup_steps,
            lr=spec.warmup_learning_rate,
            augment=config.augment,
            sam=config.sam,
            **device.key_ids(spec.device),
        )
        settings = WarmUp(spec.warmup_steps, spec.warmup_learning_rate, config.augment, config.sam)

        def compute() -> Arrays:
            data = self.real if source == "real" else (self.synthetic(run)["images"], self.synthetic(run)["labels"])
            key = Key(spec.seed).child(warmsyn_seed=run, row=job.method)
            return cnn.state_arrays(warm_up(*data, settings, key, spec.device))

        return Stage(key, compute)

    def finetune(
        self, job: Job, start: Arrays | None, start_key: str | None, prior: tuple[accounting.GaussianPhase, ...]
    ) -> Stage[dict[str, Any]]:
        spec, sensitive, n = self.spec, self.sensitive, self.n
        key = content_key(
            start=start_key,
            base=self.base,
            run=job.seed,
            n=n,
            epsilon=job.epsilon,
            delta=spec.delta,
            epochs=spec.finetune_epochs,
            batch=spec.finetune_batch,
            lr=spec.finetune_learning_rate,
            clip=spec.finetune_clip,
            **device.key_ids(spec.device),
        )

        def compute() -> dict[str, Any]:
            stage = Key(spec.seed).child(warmsyn_seed=job.seed, row=job.method, epsilon=job.epsilon)
            tuned = cnn.dp_finetune(
                cnn.from_arrays(start, stage),
                sensitive.train_images[:n],
                sensitive.train_labels[:n],
                epsilon=job.epsilon,
                delta=spec.delta,
                epochs=spec.finetune_epochs,
                batch=spec.finetune_batch,
                learning_rate=spec.finetune_learning_rate,
                clip=spec.finetune_clip,
                key=stage,
                device=spec.device,
            )
            return tuned.scored(sensitive.test_images, sensitive.test_labels)

        return Stage(key, compute)


def run_warmsyn(spec: WarmSynSpec, out: Path, progress: bool = True) -> dict[str, Any]:
    """Every row × ε × seed of the ablation, and the synthetic sets' quality."""
    spec = device.resolved(spec)
    track = WarmSynTrack(spec, StageCache(out / "cache", registry.content(spec.world)))
    preflight(track, spec.epsilons)  # before the EDM and the warm-ups: an unreachable ε writes nothing
    runs = run_stages(track, track.cache, progress)
    test_x, test_y = track.sensitive.test_images, track.sensitive.test_labels
    quality_rows = [
        {
            "seed": run,
            "cas": quality.cas(s["images"], s["labels"], test_x, test_y),
            **quality.memorisation(s["images"], track.real[0], track.holdout),
        }
        for run, s in ((run, track.synthetic(run)) for run in range(spec.seeds))
    ]
    return {
        "spec": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(spec).items()},
        "sensitive_train": track.n,
        "records": [{"row": r.job.method, "epsilon": r.job.epsilon, "seed": r.job.seed, **r.result} for r in runs],
        "quality": {"real_slice_cas": quality.cas(*track.real, test_x, test_y), "synthetic": quality_rows},
    }
