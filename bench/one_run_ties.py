"""One-run verdicts on tied scores, rows in the order a user may hand them over: randomized
response (the canary's membership bit, told truly with probability e^ε/(1 + e^ε)) on m canaries,
rows sorted by membership (non-members first, members first) or shuffled, audited at the claim
ε = 1. Beside the package's tie-break (rank by (score, u), u from the stream audit-tie-break),
the reference a stable sort gave (ties broken by row index: u = 0 for every canary).

Printed per (true ε, order, tie-break): audits flagged of the seeds with a 95 % Clopper–Pearson
interval, and the median ε_LB with its 10–90 % range. Usage:
python bench/one_run_ties.py [--seeds 20] [--canaries 10000]
"""

from __future__ import annotations

import argparse
from unittest import mock

import numpy as np
import record
from scipy.special import expit
from statsmodels.stats.proportion import proportion_confint

from dpaudit_mix.audit.one_run import audit as one_run
from dpaudit_mix.base.randomness import stream

CLAIM, DELTA = 1.0, 1e-5


def _canaries(epsilon: float, m: int, seed: int, order: str) -> tuple[np.ndarray, np.ndarray]:
    source = stream(seed, "simulated-scores", bench="one-run-ties", epsilon=epsilon, m=m).numpy()
    member = (source.random(m) < 0.5).astype(np.int64)
    scores = np.where(source.random(m) < expit(epsilon), member, 1 - member).astype(float)
    rows = {
        "non-members first": np.argsort(member, kind="stable"),
        "members first": np.argsort(-member, kind="stable"),
        "shuffled": source.permutation(m),
    }[order]
    return scores[rows], member[rows]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--canaries", type=int, default=10_000)
    args = parser.parse_args()
    print("| true ε | rows | tie-break | flagged | median ε_LB (10–90 %) |")
    print("|---|---|---|---|---|")
    for epsilon in (1.0, 1.2):
        for order in ("non-members first", "members first", "shuffled"):
            for how in ("u from audit-tie-break", "row index (stable sort)"):
                bounds, flags = [], 0
                for seed in range(args.seeds):
                    scores, member = _canaries(epsilon, args.canaries, seed, order)
                    if how.startswith("row"):
                        with mock.patch.object(one_run, "tie_break", lambda m, s, label: np.zeros(m)):
                            found = one_run.audit_one_run(scores, member, epsilon=CLAIM, delta=DELTA)
                    else:
                        found = one_run.audit_one_run(scores, member, epsilon=CLAIM, delta=DELTA, seed=seed)
                    bounds.append(found.epsilon_lower_bound)
                    flags += found.violation
                low, high = proportion_confint(flags, args.seeds, 0.05, method="beta")
                q10, q50, q90 = np.quantile(bounds, [0.1, 0.5, 0.9])
                print(
                    f"| {epsilon:g} | {order} | {how} | {flags}/{args.seeds} [{low:.2f}, {high:.2f}] | "
                    f"{q50:.3f} ({q10:.3f}–{q90:.3f}) |"
                )


if __name__ == "__main__":
    with record.captured("one_run_ties"):
        main()
