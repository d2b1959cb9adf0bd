"""What the engine needs from an audited mechanism: a :class:`RunPlan`, made before anything is
written, whose ``collect`` turns run ids, their membership and a setting into both threat
models' scores. The engine persists and resumes chunks and analyses the scores; a mechanism
only knows how to run itself with and without a canary. A one-run plan's ``collect`` is a
:class:`CanaryCollector` instead: one training run with many canaries (:mod:`..run_once`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from ...accounting import DEFAULT_ACCOUNTANT, GaussianPhase
from ...problem import Problem
from ..spec import AuditSpec


@dataclass(frozen=True)
class Setting:
    """One canary kind, with the calibrated noise or as its σ = 0 control."""

    canary: str
    noise: bool

    @property
    def name(self) -> str:
        return f"{self.canary}-{'noise' if self.noise else 'nonoise'}"


class Collector(Protocol):
    """Scores of runs ``runs`` (canary in where ``include``) of one setting: ``{"black_box": (R,),
    "white_box": (R,)}``, larger when the canary is more likely in. Run r's randomness is its own,
    so any chunking gives the same scores. Picklable: chunks may run in other processes."""

    def __call__(self, setting: Setting, runs: np.ndarray, include: np.ndarray) -> dict[str, np.ndarray]: ...


class CanaryCollector(Protocol):
    """One training run of a setting with a canary per entry of ``membership`` (in where True):
    each canary's score per threat model, ``{"black_box": (m,), "white_box": (m,)}``, larger when
    it is more likely in. Its randomness is the setting's own."""

    def __call__(self, setting: Setting, membership: np.ndarray) -> dict[str, np.ndarray]: ...


C = TypeVar("C", Collector, CanaryCollector)


@dataclass(frozen=True)
class RunPlan(Generic[C]):
    """A mechanism's audit, fixed before any run: what it collects and what it claims."""

    collect: C
    claimed_phases: tuple[GaussianPhase, ...]  # the Gaussian phases σ was calibrated for: the claim
    noise_multiplier: float  # σ the runs use (the calibrated one unless overridden)
    problem: dict[str, Any]  # audit.json's description of the data D
    canaries: dict[str, Any]  # audit.json's description of each canary
    processes: bool  # chunks run in worker processes (Python-bound torch loops), not threads
    accountant: str = DEFAULT_ACCOUNTANT  # the accountant that calibrated σ: the claim's ε is its ε

    @property
    def calibrated_noise_multiplier(self) -> float:
        return self.claimed_phases[0].noise_multiplier


class Mechanism(Protocol):
    def plan(self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None) -> RunPlan[Collector]:
        """The audit of ``spec`` on D = ``data`` (drawn from ``full``); ``noise_multiplier``
        overrides the calibrated σ. Every input error is raised here, before anything is written."""
        ...
