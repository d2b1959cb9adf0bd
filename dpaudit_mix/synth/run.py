"""`dpaudit-mix warmsyn`: the seed paper's ablation, every stage cached by content hash.

Per seed: an EDM trained on the small public slice → a synthetic set → four warm-ups (the real
slice; synthetic; synthetic + augmentation/Cutout; the same with SAM) → for each ε, the
pipeline's Opacus DP finetune of every row (and of a cold start) on the whole sensitive
training set → accuracy and macro AUC on the sensitive test set. Stages live under
``OUT/cache/<stage>/<key>`` with checksums (:func:`..cache.cached`), so a rerun recomputes nothing.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..atomic import write_json
from ..cache import cached, content_key, load_json, load_npz, save_npz, sha256, user_cache_dir
from ..data import registry
from ..data.sources import PublicSource
from ..errors import InputError
from ..pipeline import model as cnn
from ..randomness import Key
from . import edm, quality
from .spec import ROWS, WarmSynSpec
from .warmup import WarmUp, warm_up

#: what each warm-up row trains on, and how.
WARMUPS = {"warm": ("real", WarmUp()), "warmsyn": ("synthetic", WarmUp()),
           "augment": ("synthetic", WarmUp(augment=True)), "sam": ("synthetic", WarmUp(augment=True, sam=True))}


#: the synthetic source offered to the pipeline: its public slice, EDM steps and size.
SOURCE_PUBLIC, SOURCE_EDM_STEPS, SOURCE_SIZE = 96, 2000, 2000


def synthetic_source(world: str, seed: int) -> PublicSource:
    """EDM samples from the world's small public slice, as one more public source for DP-MixMin
    (cached on disk like the built problems)."""
    public = registry.world_validation(world, seed)
    x, y = public.images[:SOURCE_PUBLIC], public.labels[:SOURCE_PUBLIC]
    key = content_key(world=registry.canonical(world), seed=seed, public=SOURCE_PUBLIC, steps=SOURCE_EDM_STEPS,
                      size=SOURCE_SIZE, code=sha256(Path(edm.__file__)))

    def synthesise(stage: Key = Key(seed).child(synthetic_source=registry.canonical(world))) -> dict[str, np.ndarray]:
        labels = np.arange(SOURCE_SIZE) % edm.CLASSES
        net = edm.train(x, y, edm.TrainConfig(steps=SOURCE_EDM_STEPS), stage)
        return {"images": edm.sample(net, labels, stage), "labels": labels}

    arrays = cached(user_cache_dir() / "synthetic" / f"{key}.npz", synthesise, save_npz, load_npz)
    return PublicSource("synthetic", arrays["images"], arrays["labels"])


def preflight(spec: WarmSynSpec, n: int) -> None:
    """Calibrate every finetune's σ (Opacus' own, as :func:`..pipeline.model.dp_finetune` will), so an
    unreachable ε fails before the EDM and the warm-ups run."""
    batches = math.ceil(n / min(spec.finetune_batch, n))
    for eps in spec.epsilons:
        try:
            cnn.opacus_sigma(eps, spec.delta, 1 / batches, spec.finetune_epochs)
        except ValueError as exc:
            raise InputError(f"epsilon {eps:g} at delta {spec.delta:g} is out of reach for the finetune "
                             f"(q = 1/{batches}, {spec.finetune_epochs} epochs): {exc}") from None


def run_warmsyn(spec: WarmSynSpec, out: Path, progress: bool = True) -> dict[str, Any]:
    """Every row × ε × seed of the ablation, the synthetic sets' quality, and the wall-clock parts."""
    public = registry.world_validation(spec.world, spec.seed)
    real_x, real_y = public.images[:spec.public_size], public.labels[:spec.public_size]
    holdout = public.images[len(public.labels) // 2:]  # never trains anything: the memorisation reference
    _, sensitive = registry.world_sources(spec.world, spec.seed)
    n = max(1, round(spec.sensitive_fraction * len(sensitive.train_labels)))
    train_x, train_y = sensitive.train_images[:n], sensitive.train_labels[:n]
    preflight(spec, n)
    root = out / "cache"
    base = content_key(world=spec.world, seed=spec.seed, public=spec.public_size)
    show = {"disable": not progress, "file": sys.stderr}
    records, quality_rows = [], []
    real_cas = quality.cas(real_x, real_y, sensitive.test_images, sensitive.test_labels)
    for run in tqdm(range(spec.seeds), desc="warmsyn seeds", unit="seed", **show):
        edm_key = content_key(base=base, run=run, steps=spec.edm_steps, size=spec.synthetic_size)

        def synthesise(stage: Key = Key(spec.seed).child(warmsyn_seed=run)) -> dict[str, np.ndarray]:
            net = edm.train(real_x, real_y, edm.TrainConfig(steps=spec.edm_steps), stage)
            labels = np.arange(spec.synthetic_size) % edm.CLASSES
            return {"images": edm.sample(net, labels, stage), "labels": labels}

        synthetic = cached(root / "synthetic" / f"{edm_key}.npz", synthesise, save_npz, load_npz)
        quality_rows.append({"seed": run, "cas": quality.cas(synthetic["images"], synthetic["labels"],
                                                             sensitive.test_images, sensitive.test_labels),
                             **quality.memorisation(synthetic["images"], real_x, holdout)})
        data = {"real": (real_x, real_y), "synthetic": (synthetic["images"], synthetic["labels"])}
        starts: dict[str, dict[str, np.ndarray] | None] = {"cold": None}  # held, never re-read from the cache
        keys: dict[str, str | None] = {"cold": None}
        for row, (source, config) in WARMUPS.items():
            key = content_key(edm=edm_key if source == "synthetic" else base, run=run, source=source,
                              steps=spec.warmup_steps, lr=spec.warmup_learning_rate, augment=config.augment,
                              sam=config.sam)
            settings = WarmUp(spec.warmup_steps, spec.warmup_learning_rate, config.augment, config.sam)
            stage = Key(spec.seed).child(warmsyn_seed=run, row=row)
            starts[row] = cached(root / "warmup" / f"{key}.npz",
                                 lambda source=source, settings=settings, stage=stage: cnn.state_arrays(
                                     warm_up(*data[source], settings, stage)), save_npz, load_npz)
            keys[row] = key
        for eps in spec.epsilons:
            for row in ROWS:
                key = content_key(start=keys[row], base=base, run=run, n=n, epsilon=eps, delta=spec.delta,
                                  epochs=spec.finetune_epochs, batch=spec.finetune_batch,
                                  lr=spec.finetune_learning_rate, clip=spec.finetune_clip)

                def finetune(arrays: dict[str, np.ndarray] | None = starts[row], eps: float = eps,
                             stage: Key = Key(spec.seed).child(warmsyn_seed=run, row=row, epsilon=eps)
                             ) -> dict[str, Any]:
                    tuned = cnn.dp_finetune(cnn.from_arrays(arrays, stage), train_x, train_y, eps, spec.delta,
                                            spec.finetune_epochs, spec.finetune_batch, spec.finetune_learning_rate,
                                            spec.finetune_clip, stage)
                    return {"metrics": cnn.evaluate(tuned.model, sensitive.test_images, sensitive.test_labels),
                            "opacus_epsilon": tuned.opacus_epsilon, "noise_multiplier": tuned.noise_multiplier}

                result = cached(root / "finetune" / f"{key}.json", finetune, write_json, load_json)
                records.append({"row": row, "epsilon": eps, "seed": run, **result})
    return {"spec": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(spec).items()}, "sensitive_train": n,
            "records": records, "quality": {"real_slice_cas": real_cas, "synthetic": quality_rows}}
