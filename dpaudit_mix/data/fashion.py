"""The fashion-shift world: mnist-shift's design at the paper's scale, on Fashion-MNIST.

Fashion-MNIST (Zalando, MIT licence: 60,000 + 10,000 grey 28 × 28 images of ten clothing
classes) is read from Debian's ``dataset-fashion-mnist`` package, IDX files under
:data:`FOLDER` (``make fashion-mnist`` installs it where apt is available; nothing is
downloaded at run time). The training set is split once (seeded) into a public pool of
PUBLIC_POOL images and a sensitive set of the other 55,000, so that ρ = 0.1 gives 5,500 mixing
rows, the scale at which the paper's private λ stops following the noise; the test set is the
sensitive test split. Sources, as in mnist-shift: the same eighteen graded shifts of pool images
(SOURCE_SIZE each; a clean validation slice of the pool is never in a source) and three
distractors from other domains whose labels mean nothing here: two Animal-MNIST sets and the
MNIST digits. Tasks keep the digit worlds' names: ``digit-k`` is class k against the rest.
"""

from __future__ import annotations

import gzip
import os
from functools import cache
from pathlib import Path

import numpy as np

from ..base.errors import InputError, require
from ..base.randomness import world_layout
from . import images as im
from .shift import DISTRACTOR_SIZE, VALIDATION_SIZE, shifted_sources
from .sources import PublicSource, SensitiveData

#: where Debian's dataset-fashion-mnist puts the IDX files ($DPAUDIT_MIX_FASHION_MNIST overrides).
FOLDER = Path("/usr/share/datasets/fashion-mnist")
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
#: IDX magic numbers: unsigned bytes, 3 dimensions (images) or 1 (labels).
IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801
#: the public pool cut from the training set; the other 55,000 images are the sensitive set.
PUBLIC_POOL = 5_000
#: the largest IDX file inflated (the training images are 47 MB).
MAX_BYTES = 64 << 20


def folder() -> Path:
    return Path(os.environ.get("DPAUDIT_MIX_FASHION_MNIST") or FOLDER)


def missing() -> str | None:
    """None when the files are there, else the one line that says how to get them."""
    absent = [name for pair in FILES.values() for name in pair if not (folder() / name).is_file()]
    if not absent:
        return None
    return (
        f"fashion-shift needs Fashion-MNIST's IDX files in {folder()} ({absent[0]} is missing): "
        "install Debian's dataset-fashion-mnist (`make fashion-mnist`, or apt-get install dataset-fashion-mnist) "
        "or set DPAUDIT_MIX_FASHION_MNIST to a folder holding them"
    )


def digest() -> str:
    """The sha256 of the four IDX files (as found now), for cache keys."""
    from ..base.cache import json_sha256, sha256

    line = missing()
    if line is not None:
        raise InputError(line)
    return json_sha256({name: sha256(folder() / name) for pair in FILES.values() for name in pair}).hexdigest()


def read_idx(path: Path, magic: int, dims: int) -> np.ndarray:
    """An IDX file of unsigned bytes (gzip-compressed), checked: its magic number, its sizes
    against its length, and its inflated size before it is inflated past MAX_BYTES."""
    try:
        with gzip.open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable gzip file ({exc})") from None
    require(len(data) <= MAX_BYTES, f"{path}: inflates past {MAX_BYTES >> 20} MiB; not a Fashion-MNIST file")
    header = 4 * (1 + dims)
    require(len(data) >= header, f"{path}: truncated IDX header")
    found = int.from_bytes(data[:4], "big")
    require(found == magic, f"{path}: IDX magic {found:#010x}, expected {magic:#010x}")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    size = int(np.prod(shape))
    require(len(data) == header + size, f"{path}: {len(data) - header} data bytes, the header says {shape} = {size}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def load(split: str) -> tuple[np.ndarray, np.ndarray]:
    """``split`` ("train" or "test"): images (n, 28, 28) float32 in [0, 1], labels int64 0–9."""
    line = missing()
    if line is not None:
        raise InputError(line)
    return _load(folder(), split)


@cache
def _load(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    images_name, labels_name = FILES[split]
    images = read_idx(root / images_name, IMAGES_MAGIC, 3)
    labels = read_idx(root / labels_name, LABELS_MAGIC, 1)
    require(images.shape[1:] == (im.SIDE, im.SIDE), f"{images_name}: images are {images.shape[1:]}, not 28 × 28")
    require(len(images) == len(labels), f"{split}: {len(images)} images but {len(labels)} labels")
    require(int(labels.max(initial=0)) <= 9, f"{labels_name}: a label above 9")
    return (images / np.float32(255.0)).astype(np.float32), labels.astype(np.int64)


def _pool(seed: int) -> tuple[np.ndarray, np.ndarray, PublicSource, SensitiveData]:
    """The pool's source part, its clean validation slice, and the sensitive data."""
    x, y = load("train")
    order = world_layout(seed, "fashion-pool").permutation(len(y))
    px, py = x[order[:PUBLIC_POOL]], y[order[:PUBLIC_POOL]]
    tx, ty = load("test")
    sensitive = SensitiveData(x[order[PUBLIC_POOL:]], y[order[PUBLIC_POOL:]], tx, ty)
    validation = PublicSource("public-validation", px[:VALIDATION_SIZE], py[:VALIDATION_SIZE])
    return px[VALIDATION_SIZE:], py[VALIDATION_SIZE:], validation, sensitive


def public_validation(seed: int = 0) -> PublicSource:
    return _pool(seed)[2]


def fashion_world(seed: int = 0) -> tuple[list[PublicSource], SensitiveData]:
    """The sources and the sensitive split."""
    px, py, _, sensitive = _pool(seed)
    rng = world_layout(seed, "fashion-sources")
    sources = shifted_sources(px, py, rng)
    dx, dy = im.mnist()
    idx = rng.choice(len(dy), size=DISTRACTOR_SIZE, replace=False)
    sources.append(PublicSource("digits-mnist", dx[idx], dy[idx]))
    return sources, sensitive
