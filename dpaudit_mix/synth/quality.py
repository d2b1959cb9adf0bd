"""How good and how private-looking a synthetic set is: CAS and a nearest-neighbour memorisation check."""

from __future__ import annotations

import numpy as np

from ..data.images import features
from ..data.proxies import fit_logistic


def cas(train_images: np.ndarray, train_labels: np.ndarray, test_images: np.ndarray, test_labels: np.ndarray) -> float:
    """Classification accuracy score: a classifier trained on ``train`` (synthetic), tested on real data."""
    model = fit_logistic(features(train_images), train_labels)
    return float(np.mean(model.predict(features(test_images)) == test_labels))


def nearest_distances(queries: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Euclidean distance of each query image to its nearest reference image."""
    q, r = queries.reshape(len(queries), -1).astype(np.float64), reference.reshape(len(reference), -1)
    squared = (q**2).sum(1)[:, None] - 2 * q @ r.T + (r**2).sum(1)[None]
    return np.sqrt(np.maximum(squared.min(axis=1), 0.0))


def memorisation(synthetic: np.ndarray, train: np.ndarray, holdout: np.ndarray) -> dict[str, float]:
    """Synthetic-to-train nearest distances against real-to-train (a held-out real set): a
    synthetic set that copies its training images sits much closer to them than fresh real ones."""
    syn, real = nearest_distances(synthetic, train), nearest_distances(holdout, train)
    return {
        "synthetic_to_train_median": float(np.median(syn)),
        "real_to_train_median": float(np.median(real)),
        "ratio": float(np.median(syn) / np.median(real)),
        "synthetic_closer_than_any_real_share": float(np.mean(syn < real.min())),
    }
