"""DP-MixMin's C and η rehearsed on public data (``mix_tuning = true``) against the default
C = 3, η = 1: cos(λ_DP, λ★) and the excess mixture loss on all sensitive rows, at ε = 1 on a
split A of ρ = 0.1, paired over seeds (one-sample t-test of the differences, statsmodels).

    python bench/tuning.py [--seeds 10] [--epsilon 1]
    python bench/tuning.py --sigma-zero     # σ = 0: the rehearsed (C, η) and cos to λ★ on every task
    python bench/tuning.py --mix-command [--seeds 3] [--epsilon 100]   # `mix` with and without --tune-on
"""

from __future__ import annotations

import argparse

import numpy as np
import record
from statsmodels.stats.weightstats import DescrStatsW

from dpaudit_mix import accounting, mix
from dpaudit_mix.base.randomness import Key, stream
from dpaudit_mix.data import registry
from dpaudit_mix.learner import LearnerConfig, fit, fit_losses
from dpaudit_mix.optimum import mixmin
from dpaudit_mix.problem import Problem
from dpaudit_mix.recovery.metrics import cos_similarity
from dpaudit_mix.tuning import rehearse, rehearse_like

STEPS, DELTA, RHO = 100, 1e-5, 0.1


def _cos_at_zero(problem: Problem, star: np.ndarray, clip: float, learning_rate: float) -> float:
    config = LearnerConfig(steps=STEPS, clip=clip, learning_rate=learning_rate)
    fitted = fit(problem, config, 1, stream(0, "learner-noise", bench="sigma-0")).weights[0]
    return float(cos_similarity(fitted, star))


def sigma_zero() -> None:
    """At σ = 0, every task of both image worlds: the rehearsed (C, η) and cos(λ, λ★) with it
    and with the default C = 3, η = 1 (tests/test_tuning.py checks four of these cells)."""
    print("| world | task | rehearsed (C, η) | cos(λ, λ★) rehearsed | cos(λ, λ★) C = 3, η = 1 |")
    print("|---|---|---|---|---|")
    for world in ("mnist-labels", "mnist-shift"):
        for task in ("multiclass", *(f"digit-{d}" for d in range(10))):
            public, sensitive = registry.build_public(world, task), registry.build(world, task)
            star = mixmin(sensitive.logp).weights

            def noise(clip: float, learning_rate: float, world: str = world, task: str = task):
                return stream(0, "learner-tuning", bench="sigma-0", world=world, task=task, clip=clip, lr=learning_rate)

            chosen = rehearse(public, noise_multiplier=0.0, steps=STEPS, sample_rate=1.0, noise=noise, runs=1)

            rehearsed = _cos_at_zero(sensitive, star, chosen["clip"], chosen["learning_rate"])
            default = _cos_at_zero(sensitive, star, 3.0, 1.0)
            pair = f"({chosen['clip']:g}, {chosen['learning_rate']:g})"
            print(f"| {world} | {task} | {pair} | {rehearsed:.4f} | {default:.4f} |")


def _paired(name: str, default: list[float], tuned: list[float]) -> str:
    diff = np.array(tuned) - np.array(default)
    p = DescrStatsW(diff).ttest_mean()[1]
    return (
        f"{name}: default {np.mean(default):.4f} ± {np.std(default, ddof=1):.4f}, tuned "
        f"{np.mean(tuned):.4f} ± {np.std(tuned, ddof=1):.4f}, paired Δ {diff.mean():+.4f} (t-test p = {p:.2g})"
    )


def mix_command(seeds: int, epsilon: float) -> None:
    """The `mix` command's path on mnist-shift's multiclass problem (all its sensitive rows): the
    default C = 3, η = 1 against ``--tune-on`` its public problem, cos(λ, λ★) paired over seeds."""
    full = registry.build("mnist-shift", "multiclass")
    public = registry.build_public("mnist-shift", "multiclass")
    star = mixmin(full.logp).weights
    settings = LearnerConfig(steps=STEPS)
    cos: dict[str, list[float]] = {"default": [], "tuned": []}
    for seed in range(seeds):
        for name, tune_on in (("default", None), ("tuned", public)):
            mixed = mix.private(full, epsilon, DELTA, settings=settings, seed=seed, tune_on=tune_on)
            cos[name].append(cos_similarity(mixed.weights[0], star))
        print(f"seed {seed}: default {cos['default'][-1]:.4f}, tuned {cos['tuned'][-1]:.4f} ({mixed.learner})")
    print(_paired(f"mnist-shift multiclass, mix --epsilon {epsilon:g}, cos(λ, λ★) over {seeds} seeds", **cos))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--sigma-zero", action="store_true", help="the σ = 0 table instead")
    parser.add_argument("--mix-command", action="store_true", help="`mix` with and without --tune-on instead")
    args = parser.parse_args()
    if args.mix_command:
        mix_command(args.seeds, args.epsilon)
        return
    if args.sigma_zero:
        sigma_zero()
        return
    sigma = accounting.calibrate(args.epsilon, DELTA, 1.0, STEPS)
    print("| world | chosen (C, η) | cos default | cos tuned | Δ cos (p) | excess loss ×1e3 default | tuned | Δ (p) |")
    print("|---|---|---|---|---|---|---|---|")
    for world in ("mnist-shift", "mnist-labels"):
        full = registry.build(world, "multiclass")
        star, best = mixmin(full.logp).weights, mixmin(full.logp).loss
        public = registry.build_public(world, "multiclass")
        cos: dict[str, list[float]] = {"default": [], "tuned": []}
        loss: dict[str, list[float]] = {"default": [], "tuned": []}
        chosen = set()
        for seed in range(args.seeds):
            ids = {"bench": "tuning", "world": world, "seed": seed}
            rows = round(RHO * full.n)
            split_a = full.subset(np.sort(stream(0, "pipeline-split", **ids).numpy().permutation(full.n)[:rows]))
            tuned = rehearse_like(  # as the pipeline does
                public, rows, Key(0).child(**ids), noise_multiplier=sigma, steps=STEPS, sample_rate=1.0
            )
            chosen.add((tuned["clip"], tuned["learning_rate"]))
            for name, (clip, lr) in {"default": (3.0, 1.0), "tuned": (tuned["clip"], tuned["learning_rate"])}.items():
                config = LearnerConfig(steps=STEPS, clip=clip, noise_multiplier=sigma, learning_rate=lr)
                weights = fit(split_a, config, 1, stream(0, "learner-noise", **ids)).weights
                cos[name].append(cos_similarity(weights[0], star))
                loss[name].append(1e3 * float(fit_losses(full, weights)[0] - best))
        cells = []
        for values in (cos, loss):
            diff = np.array(values["tuned"]) - np.array(values["default"])
            p = DescrStatsW(diff).ttest_mean()[1]
            cells += [
                f"{np.mean(values['default']):.3f} ± {np.std(values['default'], ddof=1):.3f}",
                f"{np.mean(values['tuned']):.3f} ± {np.std(values['tuned'], ddof=1):.3f}",
                f"{diff.mean():+.3f} (p = {p:.2g})",
            ]
        print(f"| {world} | {', '.join(f'({c:g}, {lr:g})' for c, lr in sorted(chosen))} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    with record.captured("tuning"):
        main()
