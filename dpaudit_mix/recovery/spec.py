"""A weight-recovery spec (``recovery/*.toml``): the ε × ρ grid, k-scaling and user-level runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import accounting
from ..data import registry
from ..errors import require
from ..learner import LearnerConfig
from ..specfile import load_spec_file


@dataclass(frozen=True)
class RecoverySpec:
    """Every key optional in the TOML file; unknown keys are rejected."""

    problem: str = "mnist"  # an embedded problem name, or a path to a problem file
    tasks: tuple[str, ...] = ()  # embedded problem: () means every task
    epsilons: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 5.0)
    rhos: tuple[float, ...] = (0.05, 0.1, 0.2)  # fraction of the mixing data DP-MixMin sees
    seeds: int = 5  # DP runs per cell (one vectorised call)
    delta: float = 1e-5
    steps: int = 100
    clip: float = LearnerConfig.clip
    sample_rate: float = 1.0
    learning_rate: float = 1.0
    seed: int = 0
    user_level_tasks: tuple[str, ...] = ("digit-0",)  # the ε × ρ grid again under user-level DP
    k_values: tuple[int, ...] = (2, 4, 8, 16, 32, 64)  # () skips k-scaling
    k_tasks: tuple[str, ...] = tuple(f"digit-{d}" for d in range(10))
    k_epsilon: float = 1.0
    k_rho: float = 0.1
    k_fit_min: int = 16  # the log-log slope is fitted on k ≥ this

    def __post_init__(self) -> None:
        for name in ("tasks", "epsilons", "rhos", "user_level_tasks", "k_values", "k_tasks"):
            require(isinstance(getattr(self, name), tuple), f"{name} must be a list")
        require(len(self.epsilons) >= 1, "the ε grid is empty: give at least one epsilon")
        require(len(self.rhos) >= 1, "the ρ grid is empty: give at least one rho")
        for eps in self.epsilons + (self.k_epsilon,):
            accounting.check_epsilon(eps)
        for rho in self.rhos + (self.k_rho,):
            require(0 < rho <= 1, f"rho must be in (0, 1], got {rho}")
        require(self.seeds >= 1, f"seeds must be >= 1, got {self.seeds}")
        require(all(k >= 2 for k in self.k_values), f"every k must be >= 2, got {list(self.k_values)}")
        accounting.check_delta(self.delta)
        LearnerConfig(steps=self.steps, clip=self.clip, sample_rate=self.sample_rate,
                      learning_rate=self.learning_rate)

    @property
    def embedded(self) -> bool:
        return self.problem in registry.PROBLEMS

    def noise_multiplier(self, epsilon: float) -> float:
        """σ for (ε, δ) over T steps at rate q (one unit is an example, or a user)."""
        return accounting.calibrate(epsilon, self.delta, self.sample_rate, self.steps)

    def config(self, sigma: float, user_level: bool) -> LearnerConfig:
        return LearnerConfig(steps=self.steps, clip=self.clip, noise_multiplier=sigma, sample_rate=self.sample_rate,
                             learning_rate=self.learning_rate, user_level=user_level)


def load_recovery_spec(path: str | Path, **overrides: Any) -> RecoverySpec:
    return load_spec_file(RecoverySpec, path, **overrides)
