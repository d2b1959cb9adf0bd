"""The pipeline's example-level DP-SGD: Opacus' GradSampleModule and DPOptimizer, Poisson batches
and Gaussian noise from named streams. The image finetune runs it on the CNN; the ``opacus``
audit mechanism runs the very same code on a probe model, so an audit sees what a release does.

Opacus clips each example's gradient to C and divides by its expected batch size qn; we draw
the batches and the noise ourselves (:func:`poisson_batches`, :func:`own_noise`): Opacus' own
secure mode needs torchcsprng, which no longer installs, and its sampler would use torch's
global generator.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ..base.randomness import Key, RandomSource, source
from .nonfinite import guard_nonfinite

#: a batch's mean loss, given the private module and the batch's tensors.
Loss = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Private:
    """A model made private by Opacus: its module, optimizer and accountant, at q = 1/batches."""

    engine: PrivacyEngine
    module: nn.Module
    optimizer: Any  # opacus.optimizers.DPOptimizer
    sample_rate: float
    batches: int  # per epoch: Opacus' schedule runs this many steps per epoch

    def epsilon(self, delta: float) -> float:
        """ε spent so far, from the Opacus accountant (PRV) that counted the steps; its answer is
        remembered per history (:func:`_counted_epsilon`)."""
        return _counted_epsilon(self.engine, delta)


#: Opacus' PRV answers by the history it counted, and δ: every seed, method and task of a run
#: takes the same steps, and one answer takes a second (most of it in its RDP domain bound).
_ANSWERS: dict[tuple[tuple[tuple[float, float, int], ...], float], float] = {}
_ANSWERS_LOCK = threading.Lock()


def _counted_epsilon(engine: PrivacyEngine, delta: float) -> float:
    """``engine.get_epsilon(delta)``, asked once per (history, δ): the answer is a function of
    them alone, so a finetune that took the same steps gets the same float without the call."""
    key = (tuple((float(s), float(q), int(t)) for s, q, t in engine.accountant.history), float(delta))
    with _ANSWERS_LOCK:
        if key not in _ANSWERS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _ANSWERS[key] = float(engine.get_epsilon(delta))
        return _ANSWERS[key]


def make_private(
    model: nn.Module, examples: int, batch: int, clip: float, noise_multiplier: float, learning_rate: float
) -> Private:
    """Opacus' construction: SGD with momentum 0.9, per-example clipping at C, Poisson sampling at
    q = 1 / ⌈n / batch⌉, and noise multiplier σ.

    n = ``examples`` is the public size of the data, not the size of the set trained on: Opacus
    derives q, the steps per epoch and the divisor qn from the loader it is given, so a loader
    over the private set would let a neighbour one example larger run another q and T (the
    ``opacus`` audit certified ε_LB 1.68 at a claimed ε = 2 from exactly that, at n = 24).
    """
    public = TensorDataset(torch.zeros(examples))  # Opacus reads only its length
    loader = DataLoader(public, batch_size=min(batch, examples))
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate, momentum=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # opacus notes on secure RNG and on the batch-size estimate
        engine = PrivacyEngine(accountant="prv")
        module, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            max_grad_norm=clip,
            poisson_sampling=True,
            noise_multiplier=noise_multiplier,
        )
    guard_nonfinite(optimizer)  # a NaN/inf per-example gradient counts as absent, never as NaN released
    return Private(engine, module, optimizer, float(loader.sample_rate), len(loader))


def own_noise(optimizer: Any, gaussians: RandomSource) -> None:
    """Replace the optimizer's Gaussian noise by draws from ``gaussians`` (a named stream or the
    OS CSPRNG): Opacus clips and sums with σ set to 0 for the call (its bookkeeping unchanged),
    and N(0, σ²C²) is added here. Its accountant hook runs after the step and reads σ restored."""
    clip_and_sum = optimizer.add_noise

    def add_noise() -> None:
        sigma = optimizer.noise_multiplier
        optimizer.noise_multiplier = 0.0
        try:
            clip_and_sum()
        finally:
            optimizer.noise_multiplier = sigma
        for p in optimizer.params:
            noise = gaussians.standard_normal(tuple(p.grad.shape)) * (sigma * optimizer.max_grad_norm)
            p.grad = p.grad + torch.from_numpy(noise).to(p.grad.device, p.grad.dtype)

    optimizer.add_noise = add_noise


def poisson_batches(
    data: TensorDataset, sample_rate: float, count: int, draws: RandomSource
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` batches, each example in each independently with probability q (from ``draws``),
    on the data's device."""
    inputs, labels = data.tensors
    for _ in range(count):
        rows = torch.from_numpy(np.flatnonzero(draws.random(len(labels)) < sample_rate)).to(labels.device)
        yield inputs[rows], labels[rows]


#: how an epoch's batches are drawn: ``sampler(data, q, count, draws)`` yields ``count`` batches.
Sampler = Callable[[TensorDataset, float, int, RandomSource], Iterator[tuple[torch.Tensor, torch.Tensor]]]


def train(
    private: Private,
    data: TensorDataset,
    epochs: int,
    loss: Loss,
    key: Key | None,
    *,
    after_step: Callable[[bool], None] | None = None,
    sampler: Sampler = poisson_batches,
) -> int:
    """``epochs`` × ``batches`` DP-SGD steps; returns how many ran.

    The batches come from ``key``'s "finetune-batches" stream and the noise from its
    "finetune-noise" stream, or both from the OS CSPRNG when ``key`` is None (not reproducible).
    An empty Poisson batch is skipped (so at most the accounted steps run); ``after_step`` hears
    of every step, True once the optimizer stepped (its gradients are the released noisy mean)
    and False for a skipped one. ``sampler`` draws the batches: Poisson (what the accountant
    assumes) unless an audit checks another on purpose.
    """
    own_noise(private.optimizer, source(None if key is None else key.stream("finetune-noise")))
    draws = source(None if key is None else key.stream("finetune-batches"))
    private.module.train()
    steps = 0
    with warnings.catch_warnings():
        # torch notes that Opacus' backward hooks fire although the inputs need no gradient.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        for _ in range(epochs):
            for x, y in sampler(data, private.sample_rate, private.batches, draws):
                if len(y) == 0:
                    if after_step is not None:
                        after_step(False)
                    continue
                private.optimizer.zero_grad()
                loss(private.module, x, y).backward()
                private.optimizer.step()
                steps += 1
                if after_step is not None:
                    after_step(True)
    return steps
