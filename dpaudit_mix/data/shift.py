"""The mnist-shift world: sources that share the sensitive data's input space, shifted by degrees.

MixMin's premise is that a mixture of the sources' predictors stands in for a predictor trained
on the mixture of their data; that needs sources that cover every class and differ in *how far*
their inputs are from the sensitive data (the paper's X-ray datasets), not in which labels they
hold. Here every source covers all ten digits:
  uci                       another writer population (UCI digits at 8×8, upsampled into MNIST's frame)
  thick-1, thin-1           stroke width (grey dilation / erosion)
  scale-0.8, scale-0.6      the digit shrunk about the centre
  shift-2, shift-5          translated by 2 or 5 pixels in a random direction
  elastic-1 … elastic-3     elastic distortion, mild to strong
  noise-0.3 … noise-0.8     additive Gaussian pixel noise
  blur-2.5                  Gaussian blur
  contrast-0.5, contrast-0.15  intensities squeezed towards grey
  rotate-20, rotate-60, rotate-180
  animals-a, animals-b      distractors from another domain: Animal-MNIST silhouettes whose
                            labels are animal classes, useless for digits
MNIST-derived sources draw SOURCE_SIZE images each from the public pool minus a clean
validation slice (public, in-distribution, never in a source), which costs no privacy to use.
For k-scaling, :func:`graded_sources` composes random shifts of random strength.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..base.errors import require
from ..base.randomness import world_layout
from . import images as im
from .sources import PublicSource, SensitiveData, split_pool

#: images per MNIST-derived source, per distractor, and in the clean public validation slice.
SOURCE_SIZE, DISTRACTOR_SIZE, VALIDATION_SIZE = 400, 1000, 500

#: name prefixes of the sources from other domains (their labels mean nothing for the task).
DISTRACTORS = ("animals", "digits")

Shift = Callable[[np.ndarray, np.random.Generator], np.ndarray]

SHIFTS: dict[str, Shift] = {
    "thick-1": lambda x, rng: im.thicken(x, 1),
    "thin-1": lambda x, rng: im.thicken(x, -1),
    "scale-0.8": lambda x, rng: im.rescale(x, 0.8),
    "scale-0.6": lambda x, rng: im.rescale(x, 0.6),
    "shift-2": lambda x, rng: im.translate(x, 2, rng),
    "shift-5": lambda x, rng: im.translate(x, 5, rng),
    "elastic-1": lambda x, rng: im.elastic(x, 1 * 12.0, rng),
    "elastic-2": lambda x, rng: im.elastic(x, 2 * 12.0, rng),
    "elastic-3": lambda x, rng: im.elastic(x, 3 * 12.0, rng),
    "noise-0.3": lambda x, rng: im.add_noise(x, rng, 0.3),
    "noise-0.8": lambda x, rng: im.add_noise(x, rng, 0.8),
    "noise-0.5": lambda x, rng: im.add_noise(x, rng, 0.5),
    "blur-2.5": lambda x, rng: im.smooth(x, 2.5),
    "contrast-0.5": lambda x, rng: im.contrast(x, 0.5),
    "contrast-0.15": lambda x, rng: im.contrast(x, 0.15),
    "rotate-20": lambda x, rng: im.rotate_by(x, 20),
    "rotate-60": lambda x, rng: im.rotate_by(x, 60),
    "rotate-180": lambda x, rng: im.rotate_by(x, 180),
}

#: parametric shift kinds for graded sources: strength s ∈ (0, 1] → a transform.
KINDS: dict[str, Callable[[np.ndarray, float, np.random.Generator], np.ndarray]] = {
    "stroke": lambda x, s, rng: im.thicken(x, 1 if rng.random() < 0.5 else -1),
    "scale": lambda x, s, rng: im.rescale(x, 1 - 0.5 * s),
    "shift": lambda x, s, rng: im.translate(x, 6 * s, rng),
    "elastic": lambda x, s, rng: im.elastic(x, 36 * s, rng),
    "noise": lambda x, s, rng: im.add_noise(x, rng, 0.9 * s),
    "blur": lambda x, s, rng: im.smooth(x, 2.5 * s),
    "contrast": lambda x, s, rng: im.contrast(x, 1 - 0.85 * s),
    "rotate": lambda x, s, rng: im.rotate_by(x, 120 * s),
}


def _pool(seed: int) -> tuple[np.ndarray, np.ndarray, PublicSource, SensitiveData]:
    """The source part of the public pool, the clean validation slice, and the sensitive data."""
    px, py, sensitive = split_pool(world_layout(seed, "pool"))
    validation = PublicSource("public-validation", px[:VALIDATION_SIZE], py[:VALIDATION_SIZE])
    return px[VALIDATION_SIZE:], py[VALIDATION_SIZE:], validation, sensitive


def public_validation(seed: int = 0) -> PublicSource:
    return _pool(seed)[2]


def shift_world(seed: int = 0) -> tuple[list[PublicSource], SensitiveData, PublicSource]:
    """The sources, the sensitive split (the same as mnist-labels') and the public validation slice."""
    px, py, validation, sensitive = _pool(seed)
    ux, uy = im.uci_digits(framed=True)
    sources = [PublicSource("uci", ux, uy), *shifted_sources(px, py, world_layout(seed, "shift-sources"))]
    return sources, sensitive, validation


def shifted_sources(px: np.ndarray, py: np.ndarray, rng: np.random.Generator) -> list[PublicSource]:
    """SOURCE_SIZE pool images under each of SHIFTS, then the two Animal-MNIST distractors
    (``animals-a``, ``animals-b``), all drawn from ``rng`` in that order (the world's layout)."""
    sources = []
    for name, shift in SHIFTS.items():
        idx = rng.choice(len(py), size=SOURCE_SIZE, replace=False)
        sources.append(PublicSource(name, shift(px[idx], rng), py[idx]))
    ax, ay = im.animals()
    order = rng.permutation(len(ay))
    for i, name in enumerate(("animals-a", "animals-b")):
        idx = order[i * DISTRACTOR_SIZE : (i + 1) * DISTRACTOR_SIZE]
        sources.append(PublicSource(name, ax[idx], ay[idx]))
    return sources


def graded_sources(count: int, seed: int = 0) -> tuple[list[PublicSource], SensitiveData]:
    """``count`` sources, each 1–3 random shift kinds of random strength on its own pool sample."""
    px, py, _, sensitive = _pool(seed)
    rng = world_layout(seed, "graded-sources")
    sources = []
    kinds = sorted(KINDS)
    for s in range(count):
        idx = rng.choice(len(py), size=SOURCE_SIZE // 2, replace=False)
        x = px[idx]
        for kind in rng.choice(kinds, size=int(rng.integers(1, 4)), replace=False):
            x = KINDS[str(kind)](x, float(rng.uniform(0.1, 1.0)), rng)
        sources.append(PublicSource(f"graded-{s:02d}", np.clip(x, 0, 1).astype(np.float32), py[idx]))
    return sources, sensitive


def bad_sources(sources: list[PublicSource], permuted: int, distractors: int, seed: int = 0) -> list[PublicSource]:
    """Bad sources to add to a world's pool: ``permuted`` copies of its first sources (distractors
    aside, in the world's order) with every label moved by a derangement of the ten classes (the
    images fit the sensitive data, the labels never do), and ``distractors`` more Animal-MNIST
    sets of DISTRACTOR_SIZE (animal classes as labels; drawn from all of Animal-MNIST, so they may
    share images with mnist-shift's own two)."""
    good = [s for s in sources if not s.name.startswith(DISTRACTORS)]
    require(permuted <= len(good), f"permuted_sources = {permuted}, but the world has {len(good)} sources to copy")
    rng = world_layout(seed, "bad-sources")
    added = []
    for source in good[:permuted]:
        mapping = rng.permutation(10)
        while np.any(mapping == np.arange(10)):  # a derangement: no class keeps its label
            mapping = rng.permutation(10)
        added.append(PublicSource(f"{source.name}-permuted", source.images, mapping[source.labels]))
    if distractors:
        ax, ay = im.animals()
        order = rng.permutation(len(ay))
        for i in range(distractors):
            idx = order[i * DISTRACTOR_SIZE : (i + 1) * DISTRACTOR_SIZE]
            added.append(PublicSource(f"animals-{chr(ord('c') + i)}", ax[idx], ay[idx]))
    return added
