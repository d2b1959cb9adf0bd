"""A class-conditional EDM (Karras et al. 2022) small enough to train on 2 cores in seconds.

Names follow the paper: the denoiser D_θ(x; σ, y) = c_skip(σ) x + c_out(σ) F_θ(c_in(σ) x, c_noise(σ), y)
with c_skip = σ_d²/(σ² + σ_d²), c_out = σ σ_d/√(σ² + σ_d²), c_in = 1/√(σ² + σ_d²), c_noise = ¼ ln σ
(Table 1); training draws ln σ ~ N(P_mean, P_std²) and weights the loss by
λ(σ) = (σ² + σ_d²)/(σ σ_d)² (Eq. 8); sampling is the deterministic Heun 2nd-order solver
(Algorithm 1) on σ_i = (σ_max^{1/ρ} + i/(N−1) (σ_min^{1/ρ} − σ_max^{1/ρ}))^ρ, σ_N = 0 (Eq. 5).
F_θ is an MLP on images pooled to 14×14 (docs/concepts/warmsyn.md measured that an MLP suffices at this size);
samples are upsampled back to 28×28 for the classifier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..base.randomness import Key, torch_scope

SIGMA_DATA = 0.5
P_MEAN, P_STD = -1.2, 1.2
SIGMA_MIN, SIGMA_MAX, RHO, STEPS = 0.002, 80.0, 7.0, 18
SIDE, POOL = 28, 2  # images are modelled at 14×14
CLASSES = 10


def c_skip(sigma: torch.Tensor) -> torch.Tensor:
    return SIGMA_DATA**2 / (sigma**2 + SIGMA_DATA**2)


def c_out(sigma: torch.Tensor) -> torch.Tensor:
    return sigma * SIGMA_DATA / torch.sqrt(sigma**2 + SIGMA_DATA**2)


def c_in(sigma: torch.Tensor) -> torch.Tensor:
    return 1 / torch.sqrt(sigma**2 + SIGMA_DATA**2)


def c_noise(sigma: torch.Tensor) -> torch.Tensor:
    return torch.log(sigma) / 4


def loss_weight(sigma: torch.Tensor) -> torch.Tensor:
    return (sigma**2 + SIGMA_DATA**2) / (sigma * SIGMA_DATA) ** 2


def sigma_steps(n: int = STEPS) -> torch.Tensor:
    """σ_0 = σ_max > … > σ_{N−1} = σ_min, then σ_N = 0 (Eq. 5, ρ = 7)."""
    i = torch.arange(n, dtype=torch.float64)
    t = (SIGMA_MAX ** (1 / RHO) + i / (n - 1) * (SIGMA_MIN ** (1 / RHO) - SIGMA_MAX ** (1 / RHO))) ** RHO
    return torch.cat([t, torch.zeros(1, dtype=torch.float64)]).float()


class MLPNet(nn.Module):
    """F_θ: the scaled noisy image, Fourier features of c_noise and the one-hot class → an image."""

    def __init__(self, dim: int = (SIDE // POOL) ** 2, hidden: int = 512, frequencies: int = 16) -> None:
        super().__init__()
        self.register_buffer("freqs", torch.randn(frequencies) * 4, persistent=True)
        self.net = nn.Sequential(
            nn.Linear(dim + 2 * frequencies + CLASSES, hidden),
            nn.SiLU(),
            nn.Linear(hidden, hidden),
            nn.SiLU(),
            nn.Linear(hidden, hidden),
            nn.SiLU(),
            nn.Linear(hidden, dim),
        )

    freqs: torch.Tensor  # a registered buffer: random Fourier frequencies of the noise level

    def forward(self, x: torch.Tensor, noise: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        angles = noise[:, None] * self.freqs[None] * 2 * math.pi
        onehot = nn.functional.one_hot(labels, CLASSES).float()
        return self.net(torch.cat([x, torch.sin(angles), torch.cos(angles), onehot], dim=1))


def denoise(net: nn.Module, x: torch.Tensor, sigma: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """D_θ(x; σ, y) with EDM's preconditioning; ``sigma`` has one entry per row of ``x``."""
    s = sigma[:, None]
    return c_skip(s) * x + c_out(s) * net(c_in(s) * x, c_noise(sigma), labels)


def to_model_space(images: np.ndarray) -> torch.Tensor:
    """(n, 28, 28) in [0, 1] → (n, 196) in [−1, 1], pooled 2×2."""
    n = images.shape[0]
    pooled = images.reshape(n, SIDE // POOL, POOL, SIDE // POOL, POOL).mean(axis=(2, 4))
    return torch.from_numpy(pooled.reshape(n, -1) * 2 - 1).float()


def to_images(x: torch.Tensor) -> np.ndarray:
    """Model space back to (n, 28, 28) in [0, 1] (nearest-neighbour upsampling)."""
    small = ((x.clamp(-1, 1) + 1) / 2).cpu().numpy().reshape(-1, SIDE // POOL, SIDE // POOL)
    return np.repeat(np.repeat(small, POOL, axis=1), POOL, axis=2).astype(np.float32)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000
    batch: int = 128
    learning_rate: float = 1e-3


def train(images: np.ndarray, labels: np.ndarray, config: TrainConfig, key: Key, device: str = "cpu") -> MLPNet:
    """Fit F_θ on the small public set with EDM's σ distribution and loss weighting, on ``device``
    (the draws stay on the CPU)."""
    generator = key.stream("edm-train").torch()
    y_all, c_all = to_model_space(images), torch.from_numpy(labels.astype(np.int64))
    with torch_scope(key.stream("model-init")):
        net = MLPNet().to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=config.learning_rate)
    net.train()
    for _ in range(config.steps):
        pick = torch.randint(len(c_all), (config.batch,), generator=generator)
        y, c = y_all[pick].to(device), c_all[pick].to(device)
        sigma = torch.exp(P_MEAN + P_STD * torch.randn(config.batch, generator=generator)).to(device)
        noisy = y + sigma[:, None] * torch.randn(y.shape, generator=generator).to(device)
        loss = (loss_weight(sigma)[:, None] * (denoise(net, noisy, sigma, c) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    net.eval()
    return net


@torch.no_grad()
def sample(net: nn.Module, labels: np.ndarray, key: Key, steps: int = STEPS) -> np.ndarray:
    """Heun's 2nd-order deterministic sampler (Algorithm 1) from x_0 ~ N(0, σ_max² I), on the
    network's device."""
    generator = key.stream("edm-sample").torch()
    device = next(net.parameters()).device
    c = torch.from_numpy(labels.astype(np.int64)).to(device)
    t = sigma_steps(steps).to(device)
    x = torch.randn(len(c), (SIDE // POOL) ** 2, generator=generator).to(device) * t[0]
    for i in range(steps):
        sigma, nxt = t[i].expand(len(c)), t[i + 1]
        d = (x - denoise(net, x, sigma, c)) / t[i]
        x_next = x + (nxt - t[i]) * d
        if nxt > 0:
            d_next = (x_next - denoise(net, x_next, nxt.expand(len(c)), c)) / nxt
            x_next = x + (nxt - t[i]) * (d + d_next) / 2
        x = x_next
    return to_images(x)
