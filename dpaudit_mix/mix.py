"""`dpaudit-mix mix`: λ★ by MixMin, or DP-MixMin's λ with the claim that backs it, as a typed result."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from . import accounting, learner, tuning
from .base.errors import require
from .base.identity import META_KEY
from .base.randomness import Key, secure_root, stream
from .base.resources import require_memory
from .learner import LearnerConfig
from .optimum import mixmin
from .problem import Problem

#: bytes a fitted run costs (λ as float64, then as JSON lists of Python floats and text).
BYTES_PER_WEIGHT = 100


@dataclass(frozen=True)
class Mixed:
    """Mixture weights and what backs them: a duality gap (non-private), or (ε, δ) and σ by the
    accountant that calibrated it, with what the others certify for the same σ."""

    sources: tuple[str, ...]
    weights: np.ndarray  # (runs, k)
    losses: np.ndarray  # (runs,)
    noise_multiplier: float
    epsilon: float | None = None  # None: non-private
    delta: float | None = None
    accountant: str | None = None
    epsilon_by_accountant: dict[str, float] | None = None
    duality_gap: float | None = None  # non-private only
    seed: int | None = None  # seeded noise (audits, experiments); None: the OS CSPRNG
    #: the learner's C and η as used, and whether they were tuned (private only)
    learner: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The command's JSON: one λ as a list, several as a list of lists."""
        single = len(self.weights) == 1
        out: dict[str, Any] = {
            "sources": list(self.sources),
            "weights": self.weights[0].tolist() if single else self.weights.tolist(),
            "loss": float(self.losses[0]) if single else self.losses.tolist(),
            "epsilon": self.epsilon,
            "delta": self.delta,
            "noise_multiplier": self.noise_multiplier,
        }
        if self.epsilon is None:
            return {**out, "duality_gap": self.duality_gap}
        return {
            **out,
            "accountant": self.accountant,
            "claim": f"(epsilon, delta) = ({self.epsilon:g}, {self.delta:g}) rests on the {self.accountant} "
            "accountant, which calibrated sigma; epsilon_by_accountant shows what the others certify for the "
            "same sigma",
            "epsilon_by_accountant": self.epsilon_by_accountant,
            "learner": self.learner,
            "noise": "csprng" if self.seed is None else "seeded",
            **({} if self.seed is None else {"seed": self.seed}),
        }


def nonprivate(problem: Problem) -> Mixed:
    """λ★: MixMin on all of ``problem``, certified by its duality gap."""
    star = mixmin(problem.logp)
    return Mixed(problem.sources, star.weights[None], np.array([star.loss]), 0.0, duality_gap=star.gap)


def private(
    problem: Problem,
    epsilon: float,
    delta: float,
    *,
    settings: LearnerConfig,
    runs: int = 1,
    accountant: str = accounting.DEFAULT_ACCOUNTANT,
    seed: int | None = None,
    tune_on: Problem | None = None,
) -> Mixed:
    """``runs`` DP-MixMin fits at (ε, δ): σ calibrated by ``accountant`` for ``settings``' q and T.
    Noise from the OS CSPRNG, or (``seed``) from a named stream for audits and experiments.
    ``tune_on``, a public problem with the same sources, replaces ``settings``' C and η by the
    ones its rehearsal at this σ, T and q chooses (:func:`.tuning.rehearse_like`): it reads no
    private row, so the claim is unchanged."""
    accounting.check_epsilon(epsilon)
    accounting.check_delta(delta)
    require_memory(runs * problem.k * BYTES_PER_WEIGHT, f"mix --runs {runs} (it returns every λ)")
    sigma = accounting.calibrate(epsilon, delta, settings.sample_rate, settings.steps, accountant)
    used: dict[str, Any] = {"clip": settings.clip, "learning_rate": settings.learning_rate, "tuned": False}
    if tune_on is not None:
        settings, used = _tuned(problem, tune_on, settings, sigma, seed)
    config = replace(settings, noise_multiplier=sigma, secure=seed is None)
    noise = None if seed is None else stream(seed, "learner-noise", command="mix")
    weights = learner.fit(problem, config, runs, noise).weights
    spent = accounting.epsilons([accounting.GaussianPhase(sigma, settings.sample_rate, settings.steps)], delta)
    losses = learner.fit_losses(problem, weights)
    return Mixed(problem.sources, weights, losses, sigma, epsilon, delta, accountant, spent, seed=seed, learner=used)


def _tuned(
    problem: Problem, public: Problem, settings: LearnerConfig, sigma: float, seed: int | None
) -> tuple[LearnerConfig, dict[str, Any]]:
    """``settings`` with C and η rehearsed on ``public`` at σ, and what the output says of them. The
    rehearsal's noise is seeded by ``seed`` where the run is, else by a CSPRNG root it records."""
    require(
        public.sources == problem.sources,
        f"--tune-on: the public problem's sources {list(public.sources)} are not the private problem's "
        f"{list(problem.sources)}; build it with `dpaudit-mix problem WORLD --public` for the same world",
    )
    require(
        META_KEY not in public.meta,
        "--tune-on: that problem was built on a sensitive set (it carries its identity); the rehearsal must read "
        "public rows only: build them with `dpaudit-mix problem WORLD --public`",
    )
    require(not settings.user_level, "--tune-on rehearses example-level DP-MixMin; it does not take --user-level")
    root = secure_root() if seed is None else seed
    chosen = tuning.rehearse_like(
        public,
        problem.n,
        Key(root).child(command="mix"),
        noise_multiplier=sigma,
        steps=settings.steps,
        sample_rate=settings.sample_rate,
    )
    used = {
        "clip": chosen["clip"],
        "learning_rate": chosen["learning_rate"],
        "tuned": True,
        "tuned_on": {"task": public.task, "rows": chosen["public_n"], "rehearsal_seed": root},
    }
    return replace(settings, clip=chosen["clip"], learning_rate=chosen["learning_rate"]), used


#: from this ε the noise is small beside the learner's own bias: the defaults' C clips λ's gradient
#: (cos(λ, λ★) 0.880 on mnist-shift's multiclass problem at ε = 100, 3 seeds).
BIASED_FROM_EPSILON = 10.0
