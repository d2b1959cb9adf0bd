"""Discrete scores: randomized response at pure ε, audited from its tied 0/1 scores, with the
random tie-break (the package's many-run attack) against the same attack on the plain scores,
where a threshold must take a whole tied value or none of it.

Randomized response at ε: the released bit is the canary's membership with probability
e^ε / (1 + e^ε). Per seed, ``per-side`` in-runs and out-runs. Printed: the strict ε_LB (mean ±
std, min, max over seeds) of both, their paired difference with its t-test, and the honest
violations (ε_LB > ε) of the tie-broken attack, which must stay within the level.
Usage: python bench/ties.py [--seeds 20] [--per-side 5000] [--epsilon 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import record
from scipy.stats import ttest_rel

from dpaudit_mix.audit.attack import attack
from dpaudit_mix.audit.many_run.scores import audit_scores
from dpaudit_mix.base.randomness import stream

DELTA = 1e-5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--per-side", type=int, default=5000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    truth = np.exp(args.epsilon) / (1 + np.exp(args.epsilon))
    broken, plain = [], []
    start = time.perf_counter()
    for seed in range(args.seeds):
        rng = stream(seed, "simulated-scores", bench="ties", epsilon=args.epsilon).numpy()
        scores_in = (rng.random(args.per_side) < truth).astype(float)
        scores_out = (rng.random(args.per_side) >= truth).astype(float)
        result = audit_scores(scores_in, scores_out, epsilon=args.epsilon, delta=DELTA, seed=seed)
        broken.append(result.epsilon_lower_bound)
        scores = np.concatenate([scores_in, scores_out])
        include = np.arange(len(scores)) < args.per_side
        plain.append(attack(scores, include, np.zeros(len(scores), bool), delta=DELTA).epsilon_lower_bound)
    seconds = time.perf_counter() - start
    for name, values in (("random tie-break", broken), ("plain thresholds", plain)):
        v = np.array(values)
        print(f"{name:17s} strict ε_LB {v.mean():.3f} ± {v.std(ddof=1):.3f} (min {v.min():.3f}, max {v.max():.3f})")
    gain = np.array(broken) - np.array(plain)
    test = ttest_rel(broken, plain)
    print(f"paired gain {gain.mean():.3f} ± {gain.std(ddof=1):.3f}, t = {test.statistic:.1f}, p = {test.pvalue:.2g}")
    print(f"ratio of means {np.mean(broken) / np.mean(plain):.2f}; true ε {args.epsilon:g}")
    print(f"honest violations (ε_LB > ε): {sum(b > args.epsilon for b in broken)} of {args.seeds}")
    print(f"{args.seeds} seeds × {2 * args.per_side} scores in {seconds:.1f} s")


if __name__ == "__main__":
    with record.captured("ties"):
        main()
