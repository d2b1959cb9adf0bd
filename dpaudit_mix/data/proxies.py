"""One proxy per public source: what DP-MixMin mixes (docs/design.md §2).

Two kinds, chosen by a :class:`ProxySpec`:
- ``logistic``: multinomial logistic regression on 14×14 pooled pixels (cheap; the default);
- ``cnn``: the pipeline's SmallCNN trained on the source, as the paper's proxies are trained
  networks. ``proxy_epochs`` fixes its budget (the paper's Table 3 varies it); left out, it
  stops early on the world's public validation slice (at most :data:`MAX_EPOCHS`).

A proxy's class probabilities are smoothed towards uniform (weight 1%) so that a source that
never saw a class still gives every label a finite log-likelihood.
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..base.errors import require
from ..base.randomness import Key
from ..models import DEFAULT_NETWORK
from .images import features
from .sources import PublicSource

if TYPE_CHECKING:
    from sklearn.linear_model import LogisticRegression
    from torch import nn

CLASSES = 10
SMOOTHING = 0.01
TASKS = tuple(f"digit-{d}" for d in range(CLASSES)) + ("multiclass",)
DIGIT_TASKS = TASKS[:CLASSES]
PROXIES = ("logistic", "cnn")
#: a CNN proxy left to early stopping trains at most this many epochs, and stops after
#: PATIENCE epochs without a lower validation loss (keeping its best epoch).
MAX_EPOCHS, PATIENCE = 12, 2


@dataclass(frozen=True)
class ProxySpec:
    """Which proxy every source gets: its kind and (CNN) its epochs; None = early stopping."""

    kind: str = "logistic"
    epochs: int | None = None
    network: str = DEFAULT_NETWORK  # a cnn proxy's network (:mod:`..models.networks`)

    def __post_init__(self) -> None:
        require(self.kind in PROXIES, f"proxy must be one of {', '.join(PROXIES)}, got {self.kind!r}")
        if self.network != DEFAULT_NETWORK:
            require(self.kind == "cnn", "proxy_network applies to cnn proxies only")
            self.factory  # noqa: B018  # an unknown name is an InputError here
        if self.epochs is not None:
            require(
                isinstance(self.epochs, int) and not isinstance(self.epochs, bool) and self.epochs >= 1,
                f"proxy_epochs must be an integer >= 1, got {self.epochs!r}",
            )
            require(self.kind == "cnn", "proxy_epochs applies to cnn proxies only (logistic ones train to convergence)")

    @property
    def ids(self) -> dict[str, Any]:
        """What names these proxies in cache keys and streams ({} for the default, logistic)."""
        if self.kind == "logistic":
            return {}
        own = {"proxy_network": self.network} if self.network != DEFAULT_NETWORK else {}
        return {"proxy": self.kind, "proxy_epochs": self.epochs or "early-stop", **own}

    @property
    def label(self) -> str:
        if self.kind == "logistic":
            return "logistic"
        kind = "cnn" if self.network == DEFAULT_NETWORK else f"cnn ({self.network})"
        return f"{kind}, {self.epochs} epochs" if self.epochs else f"{kind}, early-stopped"

    @property
    def factory(self) -> Any:
        """The network a cnn proxy trains (torch is imported here, not before)."""
        from ..models.networks import NETWORKS

        return NETWORKS.get(self.network)


#: the default proxies.
LOGISTIC = ProxySpec()


class Proxy(Protocol):
    """A trained proxy: smoothed class probabilities, and the epochs it trained (None: logistic)."""

    @property
    def epochs(self) -> int | None: ...

    def probabilities(self, images: np.ndarray) -> np.ndarray: ...


def fit_logistic(x: np.ndarray, labels: np.ndarray) -> LogisticRegression:
    """Multinomial logistic regression, C = 1, 300 iterations: cheap by design (the paper's proxies
    are insensitive to their budget, Table 3), so its convergence warnings are silenced."""
    from sklearn.exceptions import ConvergenceWarning  # imported here: sklearn is slow to load
    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LogisticRegression(C=1.0, max_iter=300).fit(x, labels)


def smoothed(probs: np.ndarray) -> np.ndarray:
    return (1 - SMOOTHING) * probs + SMOOTHING / CLASSES


@dataclass(frozen=True)
class LogisticProxy:
    model: LogisticRegression
    epochs: int | None = None

    def probabilities(self, images: np.ndarray) -> np.ndarray:
        """(n, 10) smoothed class probabilities; classes the source lacked get only the smoothing."""
        probs = np.zeros((len(images), CLASSES))
        probs[:, self.model.classes_] = self.model.predict_proba(features(images))
        return smoothed(probs)


#: a CNN proxy's learning rate (Adam, batch 64), as pretraining's default.
PROXY_LEARNING_RATE = 2e-3


@dataclass(frozen=True)
class CNNProxy:
    """A SmallCNN trained on one public source: a network proxy, as the paper's are."""

    model: nn.Module
    epochs: int | None

    def probabilities(self, images: np.ndarray) -> np.ndarray:
        from ..models.cnn import class_probabilities

        return smoothed(class_probabilities(self.model, images))

    @classmethod
    def train(
        cls,
        images: np.ndarray,
        labels: np.ndarray,
        epochs: int | None,
        validation: PublicSource,
        key: Key,
        network: Any = None,
    ) -> CNNProxy:
        """``epochs`` epochs, or (None) the epoch of least validation loss on the public
        ``validation`` slice, stopping PATIENCE epochs after it (at most MAX_EPOCHS). ``network``:
        a factory (default the SmallCNN)."""
        from ..models.cnn import SmallCNN, from_arrays, state_arrays, train_epochs  # torch-heavy; only when asked for

        network = network or SmallCNN
        model = from_arrays(None, key, network=network)
        steps = train_epochs(model, images, labels, PROXY_LEARNING_RATE, key)
        if epochs is not None:
            for _ in itertools.islice(steps, epochs):
                pass
            return cls(model, epochs)
        best: tuple[float, dict[str, np.ndarray], int] = (math.inf, state_arrays(model), 0)
        for epoch in itertools.islice(steps, MAX_EPOCHS):
            probs = cls(model, epoch).probabilities(validation.images)
            loss = float(-np.mean(np.log(probs[np.arange(len(validation.labels)), validation.labels])))
            if loss < best[0]:
                best = (loss, state_arrays(model), epoch)
            elif epoch - best[2] >= PATIENCE:
                break
        return cls(from_arrays(best[1], key, network=network), best[2])


def train_proxy(source: PublicSource, spec: ProxySpec, validation: PublicSource, key: Key) -> Proxy:
    """The proxy of ``source``; a CNN draws from ``key`` named by the source (and early-stops on
    ``validation``, public data)."""
    if spec.kind == "logistic":
        return LogisticProxy(fit_logistic(features(source.images), source.labels))
    return CNNProxy.train(
        source.images, source.labels, spec.epochs, validation, key.child(source=source.name), spec.factory
    )


def train_proxies(
    sources: list[PublicSource] | tuple[PublicSource, ...], spec: ProxySpec, validation: PublicSource, key: Key
) -> list[Proxy]:
    return [train_proxy(s, spec, validation, key.child(**spec.ids)) for s in sources]


def probabilities(proxies: list[Proxy], images: np.ndarray) -> np.ndarray:
    """(k, n, 10): every proxy's smoothed class probabilities on ``images`` (n may be 0: a world
    without a test split)."""
    if len(images) == 0:
        return np.zeros((len(proxies), 0, CLASSES))
    return np.stack([p.probabilities(images) for p in proxies])


def accuracies(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(k,): each proxy's multiclass accuracy, from its probabilities (k, n, 10)."""
    return (probs.argmax(axis=2) == labels[None, :]).mean(axis=1)


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
