"""One cheap proxy per public source: multinomial logistic regression on 14×14 pooled pixels.

A proxy's class probabilities are smoothed towards uniform (weight 1%) so that a source that
never saw a class still gives every label a finite log-likelihood.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from .images import features
from .sources import PublicSource

if TYPE_CHECKING:
    from sklearn.linear_model import LogisticRegression

CLASSES = 10
SMOOTHING = 0.01
TASKS = tuple(f"digit-{d}" for d in range(CLASSES)) + ("multiclass",)


def fit_logistic(x: np.ndarray, labels: np.ndarray) -> LogisticRegression:
    """Multinomial logistic regression, C = 1, 300 iterations: cheap by design (the paper's proxies
    are insensitive to their budget, Table 3), so its convergence warnings are silenced."""
    from sklearn.exceptions import ConvergenceWarning  # imported here: sklearn is slow to load
    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LogisticRegression(C=1.0, max_iter=300).fit(x, labels)


def train_proxy(source: PublicSource) -> LogisticRegression:
    return fit_logistic(features(source.images), source.labels)


def class_probabilities(model: LogisticRegression, images: np.ndarray) -> np.ndarray:
    """(n, 10) smoothed class probabilities; classes the source lacked get only the smoothing."""
    probs = np.zeros((len(images), CLASSES))
    probs[:, model.classes_] = model.predict_proba(features(images))
    return (1 - SMOOTHING) * probs + SMOOTHING / CLASSES


def task_log_likelihood(probs: np.ndarray, labels: np.ndarray, task: str) -> np.ndarray:
    """log p_i(y_j | x_j) of the task's observed target, (n, k) from probs (k, n, 10).

    ``digit-d`` is one-vs-rest (y = [label = d], p(y=1) = p(d | x)); ``multiclass`` the label.
    """
    rows = np.arange(probs.shape[1])
    if task == "multiclass":
        return np.log(probs[:, rows, labels]).T
    digit = int(task.split("-")[1])
    p_pos = probs[:, :, digit]
    return np.log(np.where(labels == digit, p_pos, 1 - p_pos)).T
