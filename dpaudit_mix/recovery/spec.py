"""A weight-recovery spec (``recovery/*.toml``): the ε × ρ grid, k-scaling and user-level runs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import accounting
from ..base.errors import require
from ..base.specfile import Seed, check_fields, load_spec_file
from ..data import registry
from ..data.proxies import ProxySpec
from ..learner import LearnerConfig, learner_config


@dataclass(frozen=True)
class RecoverySpec:
    """Every key optional in the TOML file; unknown keys are rejected."""

    problem: str = "mnist"  # an embedded problem name, or a path to a problem file
    tasks: tuple[str, ...] = ()  # embedded problem: () means every task
    proxy: str = "logistic"  # an embedded image world's proxies: logistic or cnn
    proxy_epochs: int | None = None  # cnn proxies: fixed epochs; left out = early stopping on public validation
    epsilons: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 5.0)
    rhos: tuple[float, ...] = (0.05, 0.1, 0.2)  # fraction of the mixing data DP-MixMin sees
    seeds: int = 5  # DP runs per cell (one vectorised call)
    delta: float = 1e-5
    steps: int = 100
    clip: float = LearnerConfig.clip
    sample_rate: float = 1.0
    learning_rate: float = 1.0
    seed: Seed = 0
    # None (the key left out) means a default that fits the problem; see fitted_to.
    user_level_tasks: tuple[str, ...] | None = None  # the ε × ρ grid again under user-level DP
    k_values: tuple[int, ...] | None = None  # () skips k-scaling
    k_tasks: tuple[str, ...] | None = None
    k_epsilon: float = 1.0
    k_rho: float = 0.1
    k_fit_min: int = 16  # the log-log slope is fitted on k ≥ this
    # Choose C and η on the world's public validation problem (no privacy spent) instead of
    # clip and learning_rate; embedded worlds only (a problem file has no public slice).
    tune_on_public: bool = False

    def __post_init__(self) -> None:
        check_fields(self)
        self.proxy_spec  # noqa: B018  # validates proxy and proxy_epochs
        require(len(self.epsilons) >= 1, "the ε grid is empty: give at least one epsilon")
        require(len(self.rhos) >= 1, "the ρ grid is empty: give at least one rho")
        for eps in self.epsilons + (self.k_epsilon,):
            accounting.check_epsilon(eps)
        for rho in self.rhos + (self.k_rho,):
            require(0 < rho <= 1, f"rho must be in (0, 1], got {rho}")
        require(self.seeds >= 1, f"seeds must be >= 1, got {self.seeds}")
        require(all(k >= 2 for k in self.k_values or ()), f"every k must be >= 2, got {list(self.k_values or ())}")
        accounting.check_delta(self.delta)
        self.config(0.0, user_level=False)
        require(
            not self.tune_on_public or self.embedded,
            "tune_on_public needs an embedded world (a problem file has no public validation slice)",
        )

    @property
    def proxy_spec(self) -> ProxySpec:
        return registry.proxy_spec(self.problem, self.proxy, self.proxy_epochs)

    @property
    def embedded(self) -> bool:
        return self.problem in registry.PROBLEMS

    def fitted_to(self, tasks: tuple[str, ...], sources: int, has_users: bool) -> RecoverySpec:
        """The spec with every None default resolved for a problem offering ``tasks`` and ``sources``.

        An image world: user-level on digit-0, k up to 64 shards on every digit task. A problem
        file or the text world: its own task, user-level only when it has users, k = 2, 4, 8, …
        up to its k sources.
        """
        digits = tuple(t for t in tasks if t.startswith("digit-"))
        if self.embedded and digits:
            defaults = {"user_level_tasks": ("digit-0",), "k_values": (2, 4, 8, 16, 32, 64), "k_tasks": digits}
        else:
            powers = tuple(2**e for e in range(1, sources.bit_length()) if 2**e < sources)
            defaults = {
                "user_level_tasks": tasks if has_users else (),
                "k_values": (*powers, sources),
                "k_tasks": tasks,
            }
        missing: dict[str, Any] = {key: value for key, value in defaults.items() if getattr(self, key) is None}
        return replace(self, **missing)

    def noise_multiplier(self, epsilon: float) -> float:
        """σ for (ε, δ) over T steps at rate q (one unit is an example, or a user)."""
        return accounting.calibrate(epsilon, self.delta, self.sample_rate, self.steps)

    def config(self, sigma: float, user_level: bool) -> LearnerConfig:
        """A cell's learner: the spec's settings at σ, at the cell's level (example or user)."""
        return learner_config(self, noise_multiplier=sigma, user_level=user_level)


def load_recovery_spec(path: str | Path, **overrides: Any) -> RecoverySpec:
    return load_spec_file(RecoverySpec, path, **overrides)
