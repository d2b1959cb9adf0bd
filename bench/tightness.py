"""Tightness and power of the audit: white-box max-clip ε_LB (strict and GDP) against the claim.

0. The two threshold strategies on exact Gaussian scores at ε = 1 (μ-GDP, the white-box max-clip
   score of full batch), 20,000 runs, 100 trials: μ_LB/μ and the fraction flagging a 1.5× leak.
Then, on the embedded mnist problem (task digit-0, ρ = 0.1, T = 100, full batch, δ = 1e-5, 95% CP,
thresholds by the default strategy). The problem is built once and reused by every audit.
1. ε_LB / ε for ε ∈ {1, 2, 5} at 2,000 / 20,000 / 200,000 runs, mean ± std over seeds.
2. Power at ε = 1, 20,000 runs: the fraction of audits flagging a mechanism that leaks 1.5× (σ
   divided by 1.5, claim unchanged), and the honest one.
3. The wall time of one 200,000-run white-box audit (target ≤ 150 s on 2 cores).
Usage: python bench/tightness.py [--seeds 3] [--large-seeds 3] [--power-audits 20] [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import record

from dpaudit_mix import accounting
from dpaudit_mix.audit.attack import BUILTIN_STRATEGIES, attack
from dpaudit_mix.audit.many_run.engine import run_audit
from dpaudit_mix.audit.profile import GaussianTradeOff
from dpaudit_mix.audit.spec import AuditSpec, resolve_problem


def audit(spec: AuditSpec, problem, out: Path, sigma: float | None = None) -> tuple[dict, float]:
    start = time.perf_counter()
    summary = run_audit(spec, out, noise_multiplier=sigma, progress=False, problem=problem).summary
    return summary, time.perf_counter() - start


def spec_for(eps: float, runs: int, seed: int) -> AuditSpec:
    return AuditSpec(
        epsilon=eps,
        runs=runs,
        seed=seed,
        canaries=("max_clip",),
        threats=("white_box",),
        controls=False,
        chunk_size=4096,
    )


def strategies(trials: int = 100, runs: int = 20_000) -> None:
    mu = accounting.gdp_mu_of_epsilon(1.0, 1e-5)
    claim = GaussianTradeOff(mu)
    half = np.arange(runs) < runs // 2
    for strategy in BUILTIN_STRATEGIES:
        rng = np.random.default_rng(0)
        ratio, flagged = [], []
        for _ in range(trials):
            include, select = rng.permutation(half), rng.permutation(half)
            noise = rng.standard_normal(runs)
            ratio.append(
                attack(noise + mu * include, include, select, delta=1e-5, strategy=strategy).mu_lower_bound / mu
            )
            flagged.append(
                attack(noise + 1.5 * mu * include, include, select, delta=1e-5, strategy=strategy).profile_violation(
                    claim
                )
            )
        print(
            f"exact Gaussian scores, eps=1, {runs:,} runs, {trials} trials, {strategy:<10}: mu_LB/mu = "
            f"{np.mean(ratio):.3f} ± {np.std(ratio):.3f}; 1.5x leak flagged in {np.mean(flagged):.0%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--large-seeds", type=int, default=3)
    parser.add_argument("--power-audits", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="2k and 20k runs only, 5 power audits")
    args = parser.parse_args()
    strategies()
    problem = resolve_problem(AuditSpec())
    sizes = ((2_000, args.seeds), (20_000, args.seeds)) + (() if args.quick else ((200_000, args.large_seeds),))
    print(f"white-box max-clip, mnist/digit-0, rho=0.1, T=100, delta=1e-5, 95% CP, strategy {AuditSpec.threshold}")
    with tempfile.TemporaryDirectory() as tmp:
        for eps in (1.0, 2.0, 5.0):
            for runs, seeds in sizes:
                rows, seconds = [], []
                for seed in range(seeds):
                    summary, took = audit(spec_for(eps, runs, seed), problem, Path(tmp) / f"{eps}-{runs}-{seed}")
                    r = summary.results[0]
                    rows.append((r.epsilon_lower_bound, r.epsilon_lower_bound_gdp, r.profile_violation))
                    seconds.append(took)
                b = np.array(rows, dtype=float)
                print(
                    f"eps={eps:g} runs={runs:>7,} seeds={seeds}  strict eps_LB/eps = {b[:, 0].mean() / eps:.3f} "
                    f"± {b[:, 0].std() / eps:.3f}   GDP eps_LB/eps = {b[:, 1].mean() / eps:.3f} ± "
                    f"{b[:, 1].std() / eps:.3f}   flagged {int(b[:, 2].sum())}/{seeds}   "
                    f"{np.mean(seconds):.1f} s/audit"
                )
        audits = 5 if args.quick else args.power_audits
        sigma = accounting.calibrate(1.0, 1e-5, 1.0, 100)
        for name, override in (("honest", None), ("leaks 1.5x (sigma/1.5)", sigma / 1.5)):
            flagged = []
            for seed in range(audits):
                summary, _ = audit(
                    spec_for(1.0, 20_000, 100 + seed), problem, Path(tmp) / f"power-{name}-{seed}", override
                )
                flagged.append(summary.violation)
            print(
                f"power, eps=1, 20,000 runs, {name}: flagged in {sum(flagged)}/{audits} audits ({np.mean(flagged):.0%})"
            )


if __name__ == "__main__":
    with record.captured("tightness"):
        main()
