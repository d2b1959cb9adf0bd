"""Benchmark: the report commands against their wall-clock budgets on 2 cores, as ratios.

1. `dpaudit-mix verify-accountant --quick` (budget 120 s) and with `--self-test`.
2. `dpaudit-mix recovery recovery/default.toml` (budget 120 s), and one recovery cell as a single
   vectorised learner call against the loop of single-run fits it replaces.
3. `dpaudit-mix pipeline pipeline/default.toml` (budget 900 s; skip with --no-pipeline).
Each command runs in a fresh temporary output folder (no cache).
Usage: python bench/budgets.py [--no-pipeline]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

from dpaudit_mix.data import registry
from dpaudit_mix.learner import LearnerConfig, fit
from dpaudit_mix.randomness import stream

NOISE = stream(0, "learner-noise", bench="budgets")


def wall(*argv: str) -> float:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "dpaudit_mix.cli", *argv, "--out", out],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return time.perf_counter() - start


def cell_speedup(seeds: int = 5, repeats: int = 5) -> tuple[float, float]:
    """One recovery cell (mnist digit-0, ρ = 0.1): vectorised call vs a loop of single fits."""
    problem = registry.build("mnist", "digit-0").subset(range(240))
    config = LearnerConfig(noise_multiplier=37.3)
    start = time.perf_counter()
    for _ in range(repeats):
        fit(problem, config, seeds, NOISE)
    batched = (time.perf_counter() - start) / repeats
    start = time.perf_counter()
    for _ in range(repeats):
        for r in range(seeds):
            fit(problem, config, [r], NOISE)
    return batched, (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-pipeline", action="store_true")
    args = parser.parse_args()
    rows = [
        ("verify-accountant --quick", wall("verify-accountant", "--quick"), 120.0),
        ("verify-accountant --quick --self-test", wall("verify-accountant", "--quick", "--self-test"), None),
        ("recovery recovery/default.toml", wall("recovery", "recovery/default.toml"), 120.0),
    ]
    if not args.no_pipeline:
        rows.append(("pipeline pipeline/default.toml", wall("pipeline", "pipeline/default.toml"), 900.0))
    for name, seconds, budget in rows:
        ratio = f"{seconds / budget:.2f} of budget {budget:.0f} s" if budget else "no budget"
        print(f"{name:<42} {seconds:7.1f} s   {ratio}")
    batched, looped = cell_speedup()
    print(
        f"recovery cell (5 runs): vectorised {batched * 1e3:.1f} ms, loop of fits {looped * 1e3:.1f} ms, "
        f"speed-up {looped / batched:.1f}x"
    )


if __name__ == "__main__":
    main()
