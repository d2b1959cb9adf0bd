"""The downstream model: a small CNN, pretrained on public data sampled by λ, DP-finetuned with
Opacus (Poisson sampling) on the sensitive split, evaluated per task on the sensitive test set.

Weights travel between stages as npz arrays (no pickle); every stage draws from the named streams
of the key it is given (docs/concepts/pipeline.md), so the same key gives the same model.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from .. import accounting
from ..base import calibrations, npz
from ..base.errors import InputError, require
from ..base.randomness import Key, torch_scope
from ..base.resources import bounded
from . import opacus_sgd

CLASSES = 10


class SmallCNN(nn.Module):
    """Two conv blocks and a linear head: Opacus-compatible (no batch norm), about 11k weights."""

    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(16 * 7 * 7, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def state_arrays(model: nn.Module) -> dict[str, np.ndarray]:
    """A copy of the weights (a plain ``.numpy()`` would share memory with parameters that later
    optimizer steps update in place)."""
    return {name: value.detach().cpu().numpy().copy() for name, value in model.state_dict().items()}


#: an image network: classes → a module taking (N, 1, H, W) floats (:mod:`.networks` names them).
Factory = Callable[[int], nn.Module]


def from_arrays(
    arrays: dict[str, np.ndarray] | None, key: Key, task: str = "multiclass", network: Factory = SmallCNN
) -> nn.Module:
    """A ``network`` (the SmallCNN) with the given weights, or freshly initialised from ``key``'s
    "model-init" stream. A ``digit-d`` task's model is binary; pretrained weights give it
    :func:`binary_head`."""
    classes = CLASSES if task == "multiclass" else 2
    with torch_scope(key.stream("model-init")):
        model = network(classes)
    if not isinstance(model, nn.Module):
        raise InputError(f"a network factory returned {type(model).__name__}, not a torch.nn.Module")
    if arrays is not None:
        weights = arrays if task == "multiclass" else binary_head(arrays, int(task.split("-")[1]))
        model.load_state_dict({name: torch.from_numpy(value) for name, value in weights.items()})
    return model


def load_state(path: str | Path, build: Callable[[dict[str, np.ndarray]], nn.Module], name: str) -> nn.Module:
    """``build(arrays)`` (a fresh module for the file's arrays, drawn from a fixed stream and then
    overwritten) with the weights file's state: an ``.npz`` of float32 arrays, read without
    pickle, its headers checked first, whose names and shapes must be the module's exactly and
    whose values must be finite (an InputError naming what differs)."""
    arrays = npz.load(Path(path), "model file")
    with torch_scope(Key(0).child(loaded="model file").stream("model-init")):
        model = build(arrays)
    expected = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    found = {key: tuple(value.shape) for key, value in arrays.items()}
    require(found == expected, f"{path}: arrays {found} are not a {name}'s {expected}")
    for key, value in arrays.items():
        require(value.dtype == np.float32 and np.isfinite(value).all(), f"{path}: {key} is not finite float32")
    model.load_state_dict({key: torch.from_numpy(value.copy()) for key, value in arrays.items()})
    return model.eval()


def binary_head(arrays: dict[str, np.ndarray], digit: int) -> dict[str, np.ndarray]:
    """The pretrained 10-class model as a ``digit`` versus rest classifier: logit 1 is the digit's,
    logit 0 the mean of the others' plus log 9, so that σ(z₁ − z₀) starts near the 10-class
    model's p(digit) (exact when the other logits are equal)."""
    weight, bias = arrays["head.weight"], arrays["head.bias"]
    others = np.arange(CLASSES) != digit
    rest_w, rest_b = weight[others].mean(axis=0), bias[others].mean() + np.log(CLASSES - 1)
    return {
        **arrays,
        "head.weight": np.stack([rest_w, weight[digit]]).astype(weight.dtype),
        "head.bias": np.array([rest_b, bias[digit]], dtype=bias.dtype),
    }


def tensors(images: np.ndarray, labels: np.ndarray) -> TensorDataset:
    """Images (N, H, W) as a (N, 1, H, W) float batch, labels as int64: what the CNN trains on."""
    return TensorDataset(
        torch.from_numpy(images[:, None].astype(np.float32)), torch.from_numpy(labels.astype(np.int64))
    )


def train_epochs(
    model: nn.Module, images: np.ndarray, labels: np.ndarray, learning_rate: float, key: Key, device: str = "cpu"
) -> Iterator[int]:
    """Non-private training (Adam, batch 64) on ``device``, one epoch per step of the iterator;
    yields the epochs done so far (the caller decides when to stop)."""
    generator = key.stream("pretrain-shuffle").torch()
    loader = DataLoader(tensors(images, labels), batch_size=64, shuffle=True, generator=generator)
    optimizer = torch.optim.Adam(model.to(device).parameters(), lr=learning_rate)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in itertools.count(1):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
        yield epoch


def pretrain(
    images: np.ndarray,
    labels: np.ndarray,
    epochs: int,
    learning_rate: float,
    key: Key,
    *,
    device: str = "cpu",
    network: Factory = SmallCNN,
) -> nn.Module:
    """Non-private training of a fresh ``network`` on the λ-sampled public examples (Adam, batch 64)."""
    model = from_arrays(None, key, network=network)
    for _ in itertools.islice(train_epochs(model, images, labels, learning_rate, key, device), epochs):
        pass
    return model


def class_probabilities(model: nn.Module, images: np.ndarray) -> np.ndarray:
    """(n, classes) softmax outputs, as float64 (computed on the model's device)."""
    model.eval()
    x = torch.from_numpy(images[:, None].astype(np.float32)).to(next(model.parameters()).device)
    with torch.no_grad():
        return torch.softmax(model(x), dim=1).double().cpu().numpy()


@dataclass(frozen=True)
class Finetuned:
    model: nn.Module
    noise_multiplier: float
    sample_rate: float
    steps: int
    opacus_epsilon: float  # ε of the finetune alone, from the Opacus accountant that calibrated it

    @property
    def phase(self) -> accounting.GaussianPhase:
        return accounting.GaussianPhase(self.noise_multiplier, self.sample_rate, self.steps)

    def weights(self) -> dict[str, np.ndarray]:
        """The finetuned CNN's state (Opacus' GradSampleModule, which wraps it, taken off)."""
        return state_arrays(getattr(self.model, "_module", self.model))

    def scored(self, images: np.ndarray, labels: np.ndarray, task: str = "multiclass") -> dict[str, Any]:
        """The finetuned model's test metrics with its accounting: what a finetune stage records.
        A ``digit-d`` task's model is binary: its metric is that digit's AUC."""
        return {
            "metrics": held_out_metrics(self.model, images, labels, task),
            "finetune_phase": asdict(self.phase),
            "finetune_epsilon": self.opacus_epsilon,
        }


@cache
def opacus_sigma(epsilon: float, delta: float, sample_rate: float, epochs: int) -> float:
    """The σ that Opacus' ``make_private_with_epsilon`` picks (its PRV calibration, same call), once
    per setting: it takes seconds, and every seed, method and row of a run asks for the same few.
    Under a deadline: at a target PRV cannot reach, Opacus doubles σ to 10⁶ with a slow PRV call
    each (about a minute at ε = 1e-6) before it gives up."""
    from opacus.accountants.utils import get_noise_multiplier

    def compute() -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # opacus' RDP note on its largest order
            return float(
                get_noise_multiplier(
                    target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, epochs=epochs, accountant="prv"
                )
            )

    what = f"Opacus' PRV calibration of epsilon {epsilon:g} at delta {delta:g}, q {sample_rate:g}, {epochs} epochs"
    request = {"opacus": "get_noise_multiplier", "epsilon": epsilon, "delta": delta, "q": sample_rate, "epochs": epochs}
    remembered = calibrations.hint(request)
    if remembered is not None:  # used only if Opacus' PRV accountant confirms it, by Opacus' own criterion
        phase = accounting.GaussianPhase(remembered, sample_rate, int(epochs / sample_rate))  # its steps
        if 0 <= epsilon - accounting.epsilon([phase], delta, "prv") <= OPACUS_TOLERANCE:
            return remembered
    sigma = bounded(compute, what=what, seconds=OPACUS_CALIBRATION_SECONDS)
    calibrations.remember(request, sigma)
    return sigma


#: Opacus' calibration stops once ε(σ) is within this much below the target (its default).
OPACUS_TOLERANCE = 0.01


#: how long Opacus' own calibration may take: it takes under a second where it succeeds, and 10 s
#: failed once with the machine three times oversubscribed (a bench beside the test suite).
OPACUS_CALIBRATION_SECONDS = 30.0


def finetune_sigma(
    epsilon: float, delta: float, batches: int, epochs: int, prior: tuple[accounting.GaussianPhase, ...] = ()
) -> float:
    """The σ of :func:`dp_finetune` at q = 1 / ``batches`` and ``batches`` steps per epoch (Opacus'
    schedule): Opacus' own calibration alone; ours after ``prior`` on the same data, so that both
    compose to ε."""
    if prior:
        return accounting.calibrate(epsilon, delta, 1 / batches, epochs * batches, prior=prior)
    try:
        return opacus_sigma(epsilon, delta, 1 / batches, epochs)
    except ValueError as exc:
        raise InputError(
            f"epsilon {epsilon:g} at delta {delta:g} is out of reach for the finetune "
            f"(q = 1/{batches}, {epochs} epochs): {exc}"
        ) from None


def batches_per_epoch(n: int, batch: int) -> int:
    """Opacus' batches per epoch for ``n`` examples at expected batch size ``batch``."""
    return math.ceil(n / min(batch, n))


def dp_finetune(
    model: nn.Module,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    epochs: int,
    batch: int,
    learning_rate: float,
    clip: float,
    key: Key | None,
    prior: tuple[accounting.GaussianPhase, ...] = (),
    device: str = "cpu",
    on_private: Callable[[opacus_sgd.Private], None] | None = None,
) -> Finetuned:
    """DP-SGD finetuning with Poisson sampling at q = 1 / ⌈n / batch⌉ (Opacus' rate).

    Alone (no ``prior``), σ is Opacus' own calibration for (ε, δ) (:func:`opacus_sigma`); after a
    ``prior`` phase on the same data, σ comes from our accountant so that both compose to ε.
    The steps are :func:`.opacus_sgd.train`'s (the code the ``opacus`` audit mechanism audits),
    on ``device``. ``on_private`` hears of the private model before the first step (a model
    release attaches its canaries there).
    """
    data = TensorDataset(*(t.to(device) for t in tensors(images, labels).tensors))
    batches = batches_per_epoch(len(data), batch)
    sigma = finetune_sigma(epsilon, delta, batches, epochs, prior)
    private = opacus_sgd.make_private(model.to(device), len(data), batch, clip, sigma, learning_rate)
    if on_private is not None:
        on_private(private)
    steps = opacus_sgd.train(private, data, epochs, cross_entropy, key)
    return Finetuned(private.module, sigma, private.sample_rate, steps, private.epsilon(delta))


def cross_entropy(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The finetune's loss (a batch's mean)."""
    return nn.functional.cross_entropy(module(x), y)


def auc_digits(labels: np.ndarray) -> tuple[int, ...]:
    """The digits whose one-vs-rest AUC ``labels`` define: an AUC ranks positives above negatives,
    so a digit absent from the held-out set (a user's data of three classes) has none, and a digit
    that is every label has no negatives. Their AUC is left out, not written as NaN."""
    counts = np.bincount(labels, minlength=CLASSES)
    return tuple(d for d in range(CLASSES) if 0 < counts[d] < len(labels))


def require_scorable(labels: np.ndarray, task: str) -> None:
    """Refuse, before anything trains, held-out labels on which ``task`` has no AUC."""
    digits = auc_digits(labels)
    if task == "multiclass":
        require(bool(digits), "the held-out labels are all one class: no digit's AUC is defined on them")
    else:
        digit = int(task.split("-")[1])
        require(digit in digits, f"the held-out labels need both {task} and the rest: its AUC is undefined on them")


def evaluate(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Per-digit one-vs-rest AUC (the digits :func:`auc_digits` defines), their mean (macro AUC),
    and multi-class accuracy."""
    require_scorable(labels, "multiclass")
    probs = class_probabilities(model, images)
    metrics = {f"digit-{d}": float(roc_auc_score(labels == d, probs[:, d])) for d in auc_digits(labels)}
    metrics["macro_auc"] = float(np.mean(list(metrics.values())))
    metrics["accuracy"] = float(np.mean(probs.argmax(axis=1) == labels))
    return metrics


def task_labels(labels: np.ndarray, task: str) -> np.ndarray:
    """The one-vs-rest target of ``digit-d``: 1 where the label is d."""
    return (labels == int(task.split("-")[1])).astype(np.int64)


def task_auc(model: nn.Module, images: np.ndarray, labels: np.ndarray, task: str) -> dict[str, float]:
    """A binary ``digit-d`` model's AUC (the positive class is its output 1)."""
    require_scorable(labels, task)
    return {"auc": float(roc_auc_score(task_labels(labels, task), class_probabilities(model, images)[:, 1]))}


def held_out_metrics(model: nn.Module, images: np.ndarray, labels: np.ndarray, task: str) -> dict[str, float]:
    """The metrics of ``task`` (:func:`evaluate` for multiclass, :func:`task_auc` for a digit)."""
    return evaluate(model, images, labels) if task == "multiclass" else task_auc(model, images, labels, task)


def chance_metrics(labels: np.ndarray, task: str) -> dict[str, float]:
    """What a model that ignores its input scores on ``task``: every AUC 0.5 (a constant score
    ranks no example above another), accuracy the commonest label's share (always guessing it)."""
    if task != "multiclass":
        return {"auc": 0.5}
    metrics = {f"digit-{d}": 0.5 for d in auc_digits(labels)}
    return {**metrics, "macro_auc": 0.5, "accuracy": float(np.bincount(labels, minlength=CLASSES).max() / len(labels))}
