"""One-run audits on exact Dirac-canary scores: level, tightness and power (issue #34).

A mechanism calibrated to (ε = 1, δ = 1e-5) by PLD; m canaries, each in with probability ½; the
released per-step values simulated exactly (audit/dirac.py) at the mechanism's real σ, scored
with the claimed σ. For each setting (q, T, m):
1. Level: the fraction of honest audits whose verdict is a violation, with its 95% Clopper–Pearson
   interval, against the 5% level.
2. Tightness: ε_LB / ε (Steinke) on the honest runs, mean ± std; and, on the first few runs, the
   profile bound ε_LB_profile / ε (its search costs seconds per audit).
3. Power: for leaks σ/c, the fraction of audits flagged.
Usage: python bench/one_run.py [--trials 1000] [--power-trials 50] [--profile-trials 5] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import record
from scipy.stats import beta

from dpaudit_mix import accounting
from dpaudit_mix.audit.dirac import dirac_scores, simulated_released
from dpaudit_mix.audit.one_run.audit import audit_one_run
from dpaudit_mix.base.randomness import stream

EPSILON, DELTA = 1.0, 1e-5
SETTINGS = ((1.0, 1), (0.1, 10))  # (q, T)
LEAKS = (1.5, 2.0, 2.5, 3.0)


def one(q: float, steps: int, canaries: int, leak: float, trial: int, profile: bool = False):  # type: ignore[no-untyped-def]
    sigma = accounting.calibrate(EPSILON, DELTA, q, steps)
    ids = {"q": q, "steps": steps, "canaries": canaries, "leak": leak, "trial": trial}
    member = stream(0, "canary-membership", bench="one-run", **ids).numpy().random(canaries) < 0.5
    rng = stream(0, "simulated-scores", bench="one-run", **ids).numpy()
    scores = dirac_scores(simulated_released(member, sigma / leak, q, steps, rng), sigma, q)
    phases = [accounting.GaussianPhase(sigma, q, steps)]
    return audit_one_run(scores, member, epsilon=EPSILON, delta=DELTA, phases=phases, profile_bound=profile)


def interval(hits: int, n: int) -> tuple[float, float]:
    low = 0.0 if hits == 0 else float(beta.ppf(0.025, hits, n - hits + 1))
    high = 1.0 if hits == n else float(beta.ppf(0.975, hits + 1, n - hits))
    return low, high


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--power-trials", type=int, default=50)
    parser.add_argument("--profile-trials", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="100 trials, 10 per leak, m = 10^3 only")
    args = parser.parse_args()
    sizes = (1000,) if args.quick else (1000, 10_000)
    trials, power_trials = (100, 10) if args.quick else (args.trials, args.power_trials)
    for q, steps in SETTINGS:
        for m in sizes:
            start = time.perf_counter()
            honest = [one(q, steps, m, 1.0, t) for t in range(trials)]
            flagged = sum(r.violation for r in honest)
            low, high = interval(flagged, trials)
            ratio = np.array([r.epsilon_lower_bound for r in honest]) / EPSILON
            seconds = (time.perf_counter() - start) / trials
            print(
                f"q={q:g} T={steps} m={m}: false violations {flagged}/{trials} = {flagged / trials:.4f} "
                f"[95% CI {low:.4f}, {high:.4f}] (level 0.05); Steinke ε_LB/ε {ratio.mean():.3f} "
                f"± {ratio.std(ddof=1):.3f}; {seconds:.3f} s per audit",
                flush=True,
            )
            profiles = [one(q, steps, m, 1.0, t, profile=True) for t in range(args.profile_trials)]
            prof = np.array([r.epsilon_lower_bound_profile for r in profiles]) / EPSILON
            print(
                f"    profile ε_LB/ε over {len(profiles)} runs: {prof.mean():.3f} ± {prof.std(ddof=1):.3f}", flush=True
            )
            for leak in LEAKS:
                hits = sum(one(q, steps, m, leak, t).violation for t in range(power_trials))
                print(f"    leak σ/{leak:g}: flagged {hits}/{power_trials} = {hits / power_trials:.2f}", flush=True)


if __name__ == "__main__":
    with record.captured("one_run"):
        main()
