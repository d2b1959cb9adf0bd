"""The mechanism under verification, and deliberately broken variants of it (mutants).

A release turns a claim (ε, δ, q, T) into a noise multiplier σ (the *wiring*: which numbers the
accountant is told) and then runs the learner (the *mechanism*: clipping, noise, normaliser).
A mutant breaks one of the two. The honest mechanism is the package's own code, unchanged; a
learner mutant swaps one of the learner's primitives (``learner._clip_weights``,
``_noise_scale``, ``_normaliser``) or the accountant's ``_pld_event`` for the length of a
``with mechanism.active():`` block; a DP-SGD mutant swaps a piece of the pipeline's Opacus
DP-SGD (:mod:`..models.opacus_sgd`) or of its user-level DP-SGD (:mod:`..models.userdp`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any
from unittest import mock

import dp_accounting
import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from .. import accounting, learner
from ..models import opacus_sgd, userdp
from ..randomness import RandomSource

#: the parts of a release a check exercises, and a mutant may break.
ACCOUNTANT, WIRING, LEARNER = "accountant", "wiring", "learner"
OPACUS, USER_DPSGD = "opacus", "user-dpsgd"  # the pipeline's DP-SGD: its Opacus finetune, its user-level step

NoiseRule = Callable[[float, float, float, int], float]


def _calibrated(epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    return accounting.calibrate(epsilon, delta, sample_rate, steps)


@dataclass(frozen=True)
class Mechanism:
    """``noise_multiplier(ε, δ, q, T)`` is the σ the release runs with; ``patches`` replace
    functions of a module while the mechanism is active; ``breaks`` names the parts changed."""

    name: str
    description: str
    noise_multiplier: NoiseRule = _calibrated
    patches: tuple[tuple[ModuleType, str, Callable], ...] = ()
    breaks: frozenset[str] = frozenset()

    @contextmanager
    def active(self) -> Iterator[None]:
        accounting.clear_caches()  # no answer computed before the patches may serve under them
        try:
            with ExitStack() as stack:
                for module, attribute, replacement in self.patches:
                    stack.enter_context(mock.patch.object(module, attribute, replacement))
                yield
        finally:
            accounting.clear_caches()  # nor one computed under them after


HONEST = Mechanism("honest", "the package as shipped")


def _no_clipping(f: np.ndarray, floor: np.ndarray | float) -> np.ndarray:
    return np.reciprocal(f, out=f)


#: the loose-clipping mutant clips at this multiple of the C that noise and accountant assume.
LOOSE_CLIP_FACTOR = 1.5
_shipped_clip_weights = learner._clip_weights
_shipped_noise_scale = learner._noise_scale
_shipped_pld_event = accounting._pld_event


def _loose_clipping(f: np.ndarray, floor: np.ndarray | float) -> np.ndarray:
    return _shipped_clip_weights(f, floor / LOOSE_CLIP_FACTOR)


def _half_noise(sigma_clip: float, k: int) -> np.ndarray:
    scale = _shipped_noise_scale(sigma_clip, k)
    scale[(k + 1) // 2 :] = 0.0
    return scale


def _realised_normaliser(sample_rate: float, units: int, mask: np.ndarray | None, canary_in: np.ndarray) -> np.ndarray:
    batch = (units if mask is None else mask.sum(axis=0)) + canary_in
    return np.maximum(batch, 1.0)


def _pld_half_steps(phase: accounting.GaussianPhase) -> dp_accounting.DpEvent:
    return _shipped_pld_event(replace(phase, steps=max(1, phase.steps // 2)))


_shipped_make_private = opacus_sgd.make_private


def _optimizer_half_noise(*args: Any, **kwargs: Any) -> opacus_sgd.Private:
    private = _shipped_make_private(*args, **kwargs)
    private.optimizer.noise_multiplier /= 2
    return private


def _shuffled_batches(
    data: TensorDataset, sample_rate: float, count: int, draws: RandomSource
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """An epoch of fixed-size batches (a shuffle cut in ``count``): every example exactly once."""
    inputs, labels = data.tensors
    for rows in np.array_split(np.argsort(draws.random(len(labels))), count):
        index = torch.from_numpy(rows)
        yield inputs[index], labels[index]


def _per_window_step(
    model: nn.Module, data: list[torch.Tensor], config: userdp.UserLevelSGD, batches: RandomSource, noise: RandomSource
) -> torch.Tensor:
    """User-level DP-SGD that clips each window's gradient to C and sums a user's windows
    unclipped: a user with m windows moves the sum by up to mC."""
    sampled = np.flatnonzero(batches.random(len(data)) < config.sample_rate)
    size = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = torch.zeros(size)
    for u in sampled:
        windows = userdp._pick(data[u], config.windows_per_user, batches)
        each = torch.stack([userdp.user_gradient(model, window[None]) for window in windows])
        total += userdp.clip_rows(each, config.clip).sum(dim=0)
    gaussian = torch.from_numpy(noise.standard_normal(size)).to(total.dtype)
    return (total + config.noise_multiplier * config.clip * gaussian) / (
        config.sample_rate * userdp.divisor_users(config, data)
    )


MUTANTS: tuple[Mechanism, ...] = (
    Mechanism(
        "sigma_halved",
        "the learner adds half the calibrated noise",
        lambda e, d, q, t: _calibrated(e, d, q, t) / 2,
        breaks=frozenset({WIRING}),
    ),
    Mechanism(
        "q_under_reported",
        "the accountant is told q/2 while the learner samples at q",
        lambda e, d, q, t: _calibrated(e, d, q / 2, t),
        breaks=frozenset({WIRING}),
    ),
    Mechanism(
        "steps_under_counted",
        "the accountant is told T/2 steps while the learner runs T",
        lambda e, d, q, t: _calibrated(e, d, q, max(1, t // 2)),
        breaks=frozenset({WIRING}),
    ),
    Mechanism(
        "clipping_disabled",
        "per-example gradients are not clipped",
        patches=((learner, "_clip_weights", _no_clipping),),
        breaks=frozenset({LEARNER}),
    ),
    Mechanism(
        "loose_clipping",
        f"gradients are clipped at {LOOSE_CLIP_FACTOR:g}C while noise and accountant assume C",
        patches=((learner, "_clip_weights", _loose_clipping),),
        breaks=frozenset({LEARNER}),
    ),
    Mechanism(
        "realised_normaliser",
        "the noisy sum is divided by the realised batch size, not qn",
        patches=((learner, "_normaliser", _realised_normaliser),),
        breaks=frozenset({LEARNER}),
    ),
    Mechanism(
        "partial_noise",
        "noise is added to only the first half of the k coordinates",
        patches=((learner, "_noise_scale", _half_noise),),
        breaks=frozenset({LEARNER}),
    ),
    Mechanism(
        "pld_half_steps",
        "the PLD accountant composes T/2 steps instead of T",
        patches=((accounting, "_pld_event", _pld_half_steps),),
        breaks=frozenset({ACCOUNTANT}),
    ),
    Mechanism(
        "opacus_sigma_halved",
        "the Opacus optimizer adds half the noise it was made private with",
        patches=((opacus_sgd, "make_private", _optimizer_half_noise),),
        breaks=frozenset({OPACUS}),
    ),
    Mechanism(
        "fixed_size_batches",
        "the Opacus DP-SGD takes shuffled fixed-size batches while the accountant assumes Poisson",
        patches=((opacus_sgd, "poisson_batches", _shuffled_batches),),
        breaks=frozenset({OPACUS}),
    ),
    Mechanism(
        "per_window_clipping",
        "user-level DP-SGD clips each window, not each user's summed gradient",
        patches=((userdp, "released_step", _per_window_step),),
        breaks=frozenset({USER_DPSGD}),
    ),
)
