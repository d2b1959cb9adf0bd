"""Warm-up before DP-SGD (WarmSyn): common augmentation, Cutout, and an optional SAM optimiser.

Augmentation draws a small random affine map per image (shift ≤ 2 px, rotation ≤ 10°, scale
0.9–1.1) and Cutout zeroes one random 8×8 square (DeVries & Taylor 2017). SAM (Foret et al.
2021) takes the gradient at the worst nearby weights, w + ρ g/‖g‖, and applies it at w.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..base.randomness import Key
from .cnn import from_arrays

SHIFT, ROTATION, SCALE, CUTOUT = 2 / 14, np.pi / 18, 0.1, 8  # shift in [−1, 1] grid units: 2 px of 28


def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A random small affine map per image, then Cutout (drawn on the CPU, applied on x's device)."""
    n, device = x.shape[0], x.device

    def uniform(scale: float) -> torch.Tensor:
        return (torch.rand(n, generator=generator) * 2 - 1) * scale

    angle, scale = uniform(ROTATION), 1 + uniform(SCALE)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = torch.cos(angle) / scale
    theta[:, 0, 1] = -torch.sin(angle) / scale
    theta[:, 1, 0] = torch.sin(angle) / scale
    theta[:, 1, 1] = torch.cos(angle) / scale
    theta[:, 0, 2], theta[:, 1, 2] = uniform(SHIFT), uniform(SHIFT)
    grid = nn.functional.affine_grid(theta.to(device), list(x.shape), align_corners=False)
    out = nn.functional.grid_sample(x, grid, align_corners=False)
    side = x.shape[-1]
    rows = torch.randint(side - CUTOUT + 1, (n,), generator=generator)
    cols = torch.randint(side - CUTOUT + 1, (n,), generator=generator)
    rows, cols = rows.to(device), cols.to(device)
    r, c = torch.arange(side, device=device)[None, :, None], torch.arange(side, device=device)[None, None, :]
    hole = (
        (r >= rows[:, None, None])
        & (r < rows[:, None, None] + CUTOUT)
        & (c >= cols[:, None, None])
        & (c < cols[:, None, None] + CUTOUT)
    )
    return out * (~hole)[:, None].float()


class SAM:
    """Sharpness-aware minimisation around a base optimiser (two gradient evaluations per step)."""

    def __init__(self, params: list[nn.Parameter], base: torch.optim.Optimizer, rho: float = 0.05) -> None:
        self.params, self.base, self.rho = params, base, rho

    def step(self, closure: Callable[[], torch.Tensor]) -> None:
        closure()  # gradient at w
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = torch.norm(torch.stack([g.norm() for g in grads])) + 1e-12
        moved = []
        with torch.no_grad():
            for p in self.params:
                if p.grad is None:
                    continue
                moved.append((p, p.detach().clone()))
                p.add_(self.rho * p.grad / norm)
        self.base.zero_grad()
        closure()  # gradient at w + ε
        with torch.no_grad():
            for p, w in moved:
                p.copy_(w)  # back to w exactly ((w + ε) − ε is not w in floating point)
        self.base.step()
        self.base.zero_grad()


@dataclass(frozen=True)
class WarmUp:
    steps: int = 600  # batches of 64 drawn with replacement: the same budget whatever the set's size
    learning_rate: float = 0.05
    augment: bool = False
    sam: bool = False


def warm_up(images: np.ndarray, labels: np.ndarray, config: WarmUp, key: Key, device: str = "cpu") -> nn.Module:
    """Non-private training of the pipeline's CNN on public (real or synthetic) images (SGD,
    momentum 0.9), on ``device``."""
    model = from_arrays(None, key).to(device)
    generator = key.stream("warmup").torch()
    x_all = torch.from_numpy(images[:, None].astype(np.float32)).to(device)
    y_all = torch.from_numpy(labels.astype(np.int64)).to(device)
    base = torch.optim.SGD(model.parameters(), lr=config.learning_rate, momentum=0.9)
    sam = SAM(list(model.parameters()), base) if config.sam else None
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for _ in range(config.steps):
        pick = torch.randint(len(y_all), (64,), generator=generator).to(device)
        x, y = x_all[pick], y_all[pick]
        if config.augment:
            x = augment(x, generator)

        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            loss = loss_fn(model(x), y)
            loss.backward()
            return loss

        if sam is None:
            base.zero_grad()
            closure()
            base.step()
        else:
            sam.step(closure)
    return model
