"""`dpaudit-mix audit-scores` on exact Gaussian scores: how often an honest claim passes and a
1.5× leak is flagged, through the command line (its exit code), as an outside user would run it.

Scores: out ~ N(0, 1), in ~ N(μ, 1), 20,000 per class, μ = the claimed μ-GDP of (ε = 1, δ = 1e-5)
(honest), or 1.5 μ (a leak). Per seed, one .npz and one `audit-scores` call; the exit code is 0
(no violation) or 3 (violation). The target: exit 0 in ≥ 95 % of honest seeds, exit 3 in ≥ 95 %
of leaking ones. Usage: python bench/audit_scores.py [--seeds 20] [--per-class 20000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import record

from dpaudit_mix import accounting
from dpaudit_mix.base.randomness import stream

EPSILON, DELTA = 1.0, 1e-5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--per-class", type=int, default=20_000)
    args = parser.parse_args()
    mu = accounting.gdp_mu_of_epsilon(EPSILON, DELTA)
    with tempfile.TemporaryDirectory() as tmp:
        for name, shift in (("honest", mu), ("leaks 1.5x", 1.5 * mu)):
            codes, start = [], time.perf_counter()
            for seed in range(args.seeds):
                rng = stream(seed, "simulated-scores", bench="audit-scores", case=name).numpy()
                path = Path(tmp) / f"{seed}.npz"
                np.savez(
                    path, in_scores=rng.normal(shift, 1, args.per_class), out_scores=rng.normal(0, 1, args.per_class)
                )
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "dpaudit_mix.cli",
                        "audit-scores",
                        str(path),
                        "--epsilon",
                        str(EPSILON),
                        "--delta",
                        str(DELTA),
                    ],
                    capture_output=True,
                    text=True,
                )
                codes.append(done.returncode)
            seconds = (time.perf_counter() - start) / args.seeds
            print(
                f"{name:<11} mu = {shift:.3f}: exit 0 in {codes.count(0)}/{args.seeds}, exit 3 in "
                f"{codes.count(3)}/{args.seeds}, other {len(codes) - codes.count(0) - codes.count(3)}; "
                f"{seconds:.2f} s per call"
            )


if __name__ == "__main__":
    with record.captured("audit_scores"):
        main()
