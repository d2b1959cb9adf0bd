"""A WarmSyn spec (``warmsyn/*.toml``): the public slice, the EDM, the warm-up and the DP finetune."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import accounting
from ..base.errors import require
from ..base.resources import BYTES_PER_SYNTHETIC, require_memory
from ..base.specfile import Seed, check_fields, load_spec_file
from ..data import registry
from ..models import device

#: the seed paper's ablation, in order; each row adds one thing to the one before.
ROWS = ("cold", "warm", "warmsyn", "augment", "sam")


@dataclass(frozen=True)
class WarmSynSpec:
    """Every key optional in the TOML file; unknown keys are rejected."""

    world: str = "mnist-labels"  # whose public validation slice and sensitive data are used
    public_size: int = 96  # the small in-distribution public set: 4% of the 2,400 sensitive training images
    synthetic_size: int = 5000
    edm_steps: int = 2000
    epsilons: tuple[float, ...] = (1.0, 2.0, 5.0)
    delta: float = 1e-5
    seeds: int = 3
    seed: Seed = 0
    warmup_steps: int = 600
    warmup_learning_rate: float = 0.05
    finetune_epochs: int = 4
    finetune_batch: int = 256
    finetune_learning_rate: float = 0.1
    finetune_clip: float = 1.0
    sensitive_fraction: float = 1.0  # use this fraction of the sensitive training set (smaller = faster)
    device: str = "cpu"  # where the EDM, the warm-ups and the finetunes compute: cpu, cuda, or auto

    def __post_init__(self) -> None:
        check_fields(self)
        device.check(self.device)
        registry.image_world(self.world)
        require(
            1 <= self.public_size <= 250,
            f"public_size must be in [1, 250] (half the public validation "
            f"slice; the rest is the memorisation hold-out), got {self.public_size}",
        )
        require(len(self.epsilons) >= 1, "the ε grid is empty: give at least one epsilon")
        for eps in self.epsilons:
            accounting.check_epsilon(eps)
        accounting.check_delta(self.delta)
        for name in ("synthetic_size", "edm_steps", "seeds", "warmup_steps", "finetune_epochs", "finetune_batch"):
            require(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        require(
            0 < self.sensitive_fraction <= 1, f"sensitive_fraction must be in (0, 1], got {self.sensitive_fraction}"
        )
        require_memory(self.synthetic_size * BYTES_PER_SYNTHETIC, f"synthetic_size = {self.synthetic_size}")
        for name in ("warmup_learning_rate", "finetune_learning_rate", "finetune_clip"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")


def load_warmsyn_spec(path: str | Path, **overrides: Any) -> WarmSynSpec:
    return load_spec_file(WarmSynSpec, path, **overrides)
