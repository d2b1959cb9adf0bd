"""An audit as written in ``audits/*.toml``, and what every mechanism's audit shares: the data D
(a seeded fraction ρ of the problem), which runs hold the canary, and the settings it runs.

``mechanism`` names what is audited (a registered mechanism, see :mod:`.mechanisms`): the
DP-MixMin learner, the pipeline's Opacus DP-SGD, the text track's user-level DP-SGD, or a user's
own. Keys that contradict the mechanism (its ``check``) are refused here, before anything is
written. ``one_run = true`` audits a DP-SGD mechanism from one training run with
``one_run_canaries`` canaries (:mod:`.run_once`) instead of ``runs`` neighbouring runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .. import accounting
from ..base.errors import require
from ..base.randomness import stream
from ..base.specfile import Seed, check_fields, load_spec_file
from ..data import registry
from ..learner import LearnerConfig, learner_config
from ..problem import Problem, load
from .attack import THRESHOLDS
from .catalog import check_spec, supports_one_run
from .mixmin_canaries import CANARY_KINDS, NATURAL_POLICIES, check_canary_kinds
from .one_run.audit import MIN_CANARIES
from .plan import check_detect

THREATS = ("black_box", "white_box")


@dataclass(frozen=True)
class AuditSpec:
    """An audit, as written in ``audits/*.toml`` (every key optional, unknown keys rejected);
    each key's meaning and range are in the spec-keys reference.

    Attributes:
      mechanism: what is audited (``dpmixmin``, ``opacus``, ``user-dpsgd`` or one registered).
      problem: the problem or world the runs train on.
      epsilon: the claimed ε, with ``delta``: σ is calibrated for it.
      runs: runs a side (many-run); ``detect`` sizes them instead.
      one_run: audit one training run with ``one_run_canaries`` canaries.
      seed: names every stream the audit draws from.
    """

    #: keys that size the audit two ways: ``detect`` plans what the other would fix.
    EXCLUSIVE: ClassVar[tuple[tuple[str, ...], ...]] = (("detect", "runs"), ("detect", "one_run_canaries"))

    mechanism: str = "dpmixmin"  # a registered mechanism (:data:`.catalog.MECHANISMS`)
    problem: str = "mnist"  # an embedded problem name, or a path to a problem file
    task: str = registry.DEFAULT_TASK
    proxy: str = "logistic"  # an embedded image world's proxies: logistic or cnn
    proxy_epochs: int | None = None  # cnn proxies: fixed epochs; left out = early stopping on public validation
    epsilon: float = 1.0
    delta: float = 1e-5
    rho: float = 0.1  # fraction of the problem's examples used as the mixing data D
    steps: int = 100
    clip: float = LearnerConfig.clip
    sample_rate: float = 1.0
    learning_rate: float = 1.0
    user_level: bool = False  # neighbours differ by one user (the canary is one more user)
    canaries: tuple[str, ...] = CANARY_KINDS
    natural_policy: str = "most_influential"
    natural_index: int = 0
    threats: tuple[str, ...] = THREATS
    controls: bool = True  # also run every setting with the noise removed (σ = 0)
    runs: int = 2_000
    detect: float | None = None  # instead of runs (one_run_canaries): as many as catch σ/detect with 90 %
    seed: Seed = 0
    confidence: float = 0.95
    threshold: str = "bonferroni"  # a registered threshold strategy: "bonferroni" (all runs) or "split"
    chunk_size: int = 512
    one_run: bool = False  # one training run with one_run_canaries canaries, not `runs` runs
    one_run_canaries: int = 10_000

    def __post_init__(self) -> None:
        check_fields(self)
        registry.proxy_spec(self.problem, self.proxy, self.proxy_epochs)
        accounting.check_epsilon(self.epsilon)
        accounting.check_delta(self.delta)
        require(0 < self.rho <= 1, f"rho must be in (0, 1], got {self.rho}")
        require(self.runs >= 4, f"runs must be >= 4 (two halves of in and out runs), got {self.runs}")
        if self.detect is not None:
            check_detect(self.detect)
        require(0 < self.confidence < 1, f"confidence must be in (0, 1), got {self.confidence}")
        require(self.chunk_size >= 1, f"chunk_size must be >= 1, got {self.chunk_size}")
        check_canary_kinds(self.canaries, "canaries")
        require(
            len(self.threats) >= 1 and set(self.threats) <= set(THREATS),
            f"threats must be a non-empty subset of {THREATS}, got {list(self.threats)}",
        )
        THRESHOLDS.get(self.threshold)
        require(
            self.natural_policy in NATURAL_POLICIES,
            f"natural_policy must be one of {NATURAL_POLICIES}, got {self.natural_policy!r}",
        )
        check_spec(self)
        if self.one_run:
            _check_one_run(self)
        self.learner()

    def learner(self, noise_multiplier: float = 0.0) -> LearnerConfig:
        """The audited learner at σ = ``noise_multiplier`` (:func:`..learner.learner_config`)."""
        return learner_config(self, noise_multiplier=noise_multiplier)


def _check_one_run(spec: AuditSpec) -> None:
    require(
        supports_one_run(spec.mechanism),
        f"mechanism {spec.mechanism} has no one-run mode (the DP-SGD mechanisms opacus and user-dpsgd do): "
        "drop one_run",
    )
    require(
        spec.one_run_canaries >= MIN_CANARIES,
        f"one_run_canaries must be >= {MIN_CANARIES}, got {spec.one_run_canaries}",
    )
    require(
        spec.threshold == "bonferroni",
        "a one-run audit chooses its guesses by its own fixed grid (Bonferroni): drop threshold",
    )


def load_spec(path: str | Path, **overrides: Any) -> AuditSpec:
    """Read a TOML audit spec; ``overrides`` (CLI flags, None = not given) take precedence."""
    return load_spec_file(AuditSpec, path, **overrides)


def resolve_problem(spec: AuditSpec) -> Problem:
    if spec.problem in registry.PROBLEMS:
        return registry.build(
            spec.problem, spec.task, proxy=registry.proxy_spec(spec.problem, spec.proxy, spec.proxy_epochs)
        )
    return load(registry.problem_path(spec.problem))


def mixing_rows(examples: int, spec: AuditSpec) -> np.ndarray:
    """D's rows: a seeded fraction ρ of the problem's ``examples`` (sorted)."""
    size = max(1, round(spec.rho * examples))
    return np.sort(stream(spec.seed, "audit-mixing-rows", rho=spec.rho).numpy().permutation(examples)[:size])


def mixing_data(problem: Problem, spec: AuditSpec) -> Problem:
    """D: a seeded fraction ρ of the problem's examples."""
    return problem.subset(mixing_rows(problem.n, spec))


def assignments(spec: AuditSpec) -> np.ndarray:
    """Which runs hold the canary: half of them, drawn from the seed."""
    return stream(spec.seed, "audit-assignment", runs=spec.runs).numpy().permutation(spec.runs) < spec.runs // 2
