"""C and η for a world, chosen on public data: the rule spends no privacy.

With C = 3, η = 1 the noiseless learner already misses λ★ (clipping and optimisation bias), so
these settings matter. The rule rehearses DP-MixMin itself, at the spec's (ε, δ, T, q), on the
world's public validation problem (the same proxies on clean public images): every (C, η) on a
small grid runs RUNS seeded fits, and the pair with the lowest mean excess loss α over that
problem's own λ★ wins. Nothing private is read, so the choice costs no budget.
"""

from __future__ import annotations

from typing import Any

from .. import accounting
from ..learner import LearnerConfig, fit, fit_losses
from ..optimum import mixmin
from ..problem import Problem
from ..randomness import stream

CLIPS = (0.5, 1.0, 2.0, 3.0, 5.0)
LEARNING_RATES = (0.1, 0.3, 1.0, 3.0)
RUNS = 32


def tune(public: Problem, epsilon: float, delta: float, steps: int, sample_rate: float, seed: int) -> dict[str, Any]:
    """The (C, η) with the lowest mean α on ``public`` under DP noise for (ε, δ); every candidate's α."""
    best = mixmin(public.logp).loss
    sigma = accounting.calibrate(epsilon, delta, sample_rate, steps)
    candidates = []
    for clip in CLIPS:
        for learning_rate in LEARNING_RATES:
            config = LearnerConfig(
                steps=steps, clip=clip, noise_multiplier=sigma, sample_rate=sample_rate, learning_rate=learning_rate
            )
            noise = stream(seed, "recovery-tuning", clip=clip, learning_rate=learning_rate)
            alpha = float(fit_losses(public, fit(public, config, RUNS, noise).weights).mean() - best)
            candidates.append({"clip": clip, "learning_rate": learning_rate, "alpha_1e3": 1e3 * alpha})
    choice = min(candidates, key=lambda c: c["alpha_1e3"])
    return {
        "clip": choice["clip"],
        "learning_rate": choice["learning_rate"],
        "epsilon": epsilon,
        "public_n": public.n,
        "task": public.task,
        "candidates": candidates,
    }
