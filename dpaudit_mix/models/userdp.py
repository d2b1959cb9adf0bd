"""User-level DP-SGD (docs/concepts/pipeline.md), which Opacus does not offer (its issue #366).

Each step samples every user independently with probability q (Poisson), computes each sampled
user's gradient *summed over their examples* (for the CharGRU, every user's at once in one
batched pass; for other models, one backward pass per user), clips
that sum to norm C, adds N(0, σ²C²) noise to the total and divides by the public expected
number of users qU. Adding or removing one user, with all their speeches, changes the sum by at
most C: the Gaussian phase (σ, q, T) is then accounted per user, like the learner's user level.

A user with many speeches contributes at most ``windows_per_user`` windows per step, drawn
within their own data: any per-user function keeps the bound, and it keeps a step's cost flat.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .. import accounting
from ..base.errors import require
from ..base.randomness import Key, RandomSource, source
from .chargru import WINDOW, CharGRU, window_nll
from .gru_gradients import char_gru_gradients


@dataclass(frozen=True)
class UserLevelSGD:
    """The mechanism's parameters; σ comes from the accountant (:func:`phase`)."""

    sample_rate: float  # q: each user's chance to be in a step
    steps: int  # T
    noise_multiplier: float  # σ
    clip: float  # C, on each user's summed gradient
    learning_rate: float
    windows_per_user: int = 8
    #: U of the public divisor qU: the public number of users (None: as many as it trains on). An
    #: audit's neighbour holds one user more, and must not divide by more (that would tell U).
    users: int | None = None

    def __post_init__(self) -> None:
        # σ = 0 runs (an audit's controls) are allowed here; the accountant refuses them in ``phase``.
        require(
            math.isfinite(self.noise_multiplier) and self.noise_multiplier >= 0,
            f"σ must be >= 0, got {self.noise_multiplier}",
        )
        require(0 < self.sample_rate <= 1, f"sample rate q must be in (0, 1], got {self.sample_rate}")
        require(self.steps >= 1, f"steps T must be >= 1, got {self.steps}")
        require(self.clip > 0, f"clipping norm C must be > 0, got {self.clip}")
        require(self.learning_rate > 0, f"learning rate must be > 0, got {self.learning_rate}")
        require(self.windows_per_user >= 1, f"windows_per_user must be >= 1, got {self.windows_per_user}")
        require(self.users is None or self.users >= 1, f"users must be >= 1, got {self.users}")

    @property
    def phase(self) -> accounting.GaussianPhase:
        return accounting.GaussianPhase(self.noise_multiplier, self.sample_rate, self.steps)


def user_gradient(model: nn.Module, data: torch.Tensor) -> torch.Tensor:
    """∇ Σ_w (mean NLL per character of window w) over one user's windows, flattened."""
    scored = (data[:, 1:] >= 0).sum(dim=1).clamp(min=1)
    loss = (window_nll(model, data) / scored).sum()
    grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
    return torch.cat([g.reshape(-1) for g in grads])


def _batched_pass_fits(model: CharGRU, users: list[torch.Tensor], trainable: list[nn.Parameter]) -> bool:
    """Whether :func:`.gru_gradients.char_gru_gradients` takes this call: the CharGRU trained whole
    in float32, and every user's windows int64, (m ≥ 1, WINDOW + 1); else the per-user loop does."""
    return (
        bool(users)
        and len(trainable) == len(list(model.parameters()))
        and all(p.dtype == torch.float32 for p in trainable)
        and all(u.dtype == torch.int64 and u.ndim == 2 and len(u) >= 1 and u.shape[1] == WINDOW + 1 for u in users)
    )


def per_user_gradients(model: nn.Module, users: list[torch.Tensor]) -> torch.Tensor:
    """(B, P): :func:`user_gradient` of each of the B users. A float32 CharGRU's come from one
    batched pass over every user's windows (:func:`.gru_gradients.char_gru_gradients`, equal up
    to float rounding) where they are what that pass is built for (int64 windows of WINDOW + 1
    codes); any other model's, or other input's, from one backward pass per user."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    if isinstance(model, CharGRU) and _batched_pass_fits(model, users, trainable):
        return char_gru_gradients(model, users)
    size = sum(p.numel() for p in trainable)
    device = trainable[0].device
    return torch.stack([user_gradient(model, u) for u in users]) if users else torch.zeros((0, size), device=device)


def clip_rows(per_user: torch.Tensor, clip: float) -> torch.Tensor:
    """Each row scaled to norm at most C: min(1, C/‖g_u‖)·g_u."""
    norms = per_user.norm(dim=1, keepdim=True)
    return per_user * torch.clamp(clip / norms.clamp(min=1e-12), max=1.0)


def noisy_mean(per_user: torch.Tensor, config: UserLevelSGD, users: int, source: RandomSource) -> torch.Tensor:
    """(Σ_u clip_C(g_u) + N(0, σ²C² I)) / (qU): the one released quantity of a step.

    ``per_user`` is (B, P) for the B sampled users (B may be 0); the divisor is public.
    """
    size = per_user.shape[1]
    total = clip_rows(per_user, config.clip).sum(dim=0)
    noise = torch.from_numpy(source.standard_normal(size)).to(total.device, total.dtype)
    return (total + config.noise_multiplier * config.clip * noise) / (config.sample_rate * users)


def _pick(windows: torch.Tensor, cap: int, source: RandomSource) -> torch.Tensor:
    """At most ``cap`` of a user's windows, uniformly without replacement."""
    if len(windows) <= cap:
        return windows
    return windows[torch.from_numpy(np.argsort(source.random(len(windows)))[:cap].copy()).to(windows.device)]


def released_step(
    model: nn.Module, data: list[torch.Tensor], config: UserLevelSGD, batches: RandomSource, noise: RandomSource
) -> torch.Tensor:
    """One step's released gradient: :func:`sampled_gradients`, then :func:`noisy_mean` with
    Gaussians from ``noise``."""
    return noisy_mean(sampled_gradients(model, data, config, batches), config, divisor_users(config, data), noise)


def sampled_gradients(
    model: nn.Module, data: list[torch.Tensor], config: UserLevelSGD, batches: RandomSource
) -> torch.Tensor:
    """(B, P): Poisson-sample the users (and their windows) from ``batches`` and take each sampled
    user's summed gradient over (at most ``windows_per_user`` of) their windows."""
    sampled = np.flatnonzero(batches.random(len(data)) < config.sample_rate)
    picked = [_pick(data[u], config.windows_per_user, batches) for u in sampled]
    return per_user_gradients(model, picked)


def divisor_users(config: UserLevelSGD, data: list[torch.Tensor]) -> int:
    """U of the divisor qU: the configured public count, else the users trained on."""
    return len(data) if config.users is None else config.users


#: one step's released gradient: ``step(model, users, config, batches, noise)`` (:func:`released_step`).
Step = Callable[[nn.Module, list[torch.Tensor], "UserLevelSGD", RandomSource, RandomSource], torch.Tensor]


def train(
    model: nn.Module,
    user_windows: list[np.ndarray],
    config: UserLevelSGD,
    key: Key | None,
    *,
    observe: Callable[[torch.Tensor], None] | None = None,
    device: str = "cpu",
    step: Step = released_step,
) -> nn.Module:
    """T steps of user-level DP-SGD on ``user_windows`` (one array of windows per user), with
    Adam applied to the released noisy mean (post-processing). The user sampling and window picks
    come from ``key``'s "finetune-batches" stream, the noise from its "finetune-noise" stream; with
    ``key`` None, all of them from the OS CSPRNG (not reproducible). ``observe`` sees each step's
    released noisy mean (what a white-box audit attacks). The model trains on ``device``; the
    draws stay on the CPU. ``step`` is the DP step (:func:`released_step` unless an audit checks
    another on purpose)."""
    require(len(user_windows) >= 1, "user-level DP-SGD needs at least one user")
    batches = source(None if key is None else key.stream("finetune-batches"))
    noise = source(None if key is None else key.stream("finetune-noise"))
    data = [torch.from_numpy(w).to(device) for w in user_windows]
    params = [p for p in model.to(device).parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=config.learning_rate)
    model.train()
    for _ in range(config.steps):
        update = step(model, data, config, batches, noise)
        if observe is not None:
            observe(update)
        offset = 0
        for p in params:
            p.grad = update[offset : offset + p.numel()].reshape(p.shape).to(p.dtype)
            offset += p.numel()
        optimizer.step()
    return model
