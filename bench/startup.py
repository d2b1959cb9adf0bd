"""Benchmark: start-up time of the CLI, per subcommand (docs/design.md §4).

Each command runs as a fresh process, `repeats` times; the median wall time and the median CPU
time (user + system, of the process and its children) are printed, the CPU time with its ratio to
the 0.6 s target for `--help`, `bound` and argument errors, and the wall time against the
references, a bare ``python -c pass`` and the import of everything the CLI once loaded eagerly
(torch, opacus, dp_accounting, pandas, seaborn).
Usage: python bench/startup.py [--repeats N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

import record

TARGET_CPU_S = 0.6
CLI = [sys.executable, "-m", "dpaudit_mix"]  # the entry point dpaudit-mix runs
COMMANDS = {
    "--help": [*CLI, "--help"],
    "audit --help": [*CLI, "audit", "--help"],
    "an argument error (mix, no problem)": [*CLI, "mix"],
    "an argument error (epsilon, delta 2)": [
        *CLI,
        "epsilon",
        "--noise-multiplier",
        "1",
        "--sample-rate",
        "1",
        "--steps",
        "1",
        "--delta",
        "2",
    ],
    "bound": [*CLI, "bound", "--fp", "3", "--fn", "5", "--negatives", "1000", "--positives", "1000", "--delta", "1e-5"],
    "account (all three accountants)": [
        *CLI,
        "account",
        "--noise-multiplier",
        "1.1",
        "--sample-rate",
        "0.01",
        "--steps",
        "1000",
        "--delta",
        "1e-5",
    ],
    "calibrate (pld)": [
        *CLI,
        "calibrate",
        "--epsilon",
        "1",
        "--delta",
        "1e-5",
        "--sample-rate",
        "0.01",
        "--steps",
        "1000",
    ],
}
REFERENCES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "eager imports (the old cli)": [
        sys.executable,
        "-c",
        "import torch, opacus, dp_accounting, pandas, seaborn, dpaudit_mix",
    ],
}


def median_seconds(argv: list[str], repeats: int) -> tuple[float, float]:
    """(median wall, median CPU) seconds of ``argv`` as a fresh process; any exit code counts (an
    argument error is a command too)."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    reference = {name: median_seconds(argv, args.repeats)[0] for name, argv in REFERENCES.items()}
    eager = reference["eager imports (the old cli)"]
    print(f"median of {args.repeats} runs; target {TARGET_CPU_S:g} s of CPU for --help, bound and argument errors")
    for name, seconds in reference.items():
        print(f"  reference {name:<36} {seconds:6.2f} s wall")
    for name, argv in COMMANDS.items():
        wall, cpu = median_seconds(argv, args.repeats)
        print(
            f"  {name:<46} {cpu:6.2f} s CPU   {cpu / TARGET_CPU_S:5.2f}× target   {wall:6.2f} s wall   "
            f"{wall / eager:5.2f}× eager imports"
        )


if __name__ == "__main__":
    with record.captured("startup"):
        main()
