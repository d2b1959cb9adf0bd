"""A synthetic public source: EDM samples of a world's small public slice (WarmSyn's data, offered
to DP-MixMin as one more source). Built once per (world, seed) and cached on disk like the problems."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..base.cache import cached, content_key, load_npz, save_npz, sha256, user_cache_dir
from ..base.randomness import Key
from ..models import edm
from .sources import PublicSource

#: the public images the EDM learns from, its training steps, and the samples drawn.
PUBLIC, EDM_STEPS, SIZE = 96, 2000, 2000


def synthetic_source(public: PublicSource, world: str, seed: int) -> PublicSource:
    """``SIZE`` class-balanced EDM samples of the first ``PUBLIC`` images of ``public`` (the world's
    public validation slice; ``world`` is its canonical name)."""
    x, y = public.images[:PUBLIC], public.labels[:PUBLIC]
    key = content_key(
        world=world, seed=seed, public=PUBLIC, steps=EDM_STEPS, size=SIZE, code=sha256(Path(edm.__file__))
    )

    def synthesise() -> dict[str, np.ndarray]:
        stage = Key(seed).child(synthetic_source=world)
        labels = np.arange(SIZE) % edm.CLASSES
        net = edm.train(x, y, edm.TrainConfig(steps=EDM_STEPS), stage)
        return {"images": edm.sample(net, labels, stage), "labels": labels}

    arrays = cached(user_cache_dir() / "synthetic" / f"{key}.npz", synthesise, save_npz, load_npz)
    return PublicSource("synthetic", arrays["images"], arrays["labels"])
