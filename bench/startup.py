"""Benchmark: start-up time of the CLI, per subcommand (DESIGN §10; issue #11 item 11).

Each command runs as a fresh process, `repeats` times; the median wall time is printed with its
ratio to the 1 s target and to the reference, a bare ``python -c pass`` and the import of
everything the CLI once loaded eagerly (torch, opacus, dp_accounting, pandas, seaborn).
Usage: python bench/startup.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TARGET_S = 1.0
CLI = [sys.executable, "-m", "dpaudit_mix.cli"]
COMMANDS = {
    "--help": [*CLI, "--help"],
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


def median_seconds(argv: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    reference = {name: median_seconds(argv, args.repeats) for name, argv in REFERENCES.items()}
    eager = reference["eager imports (the old cli)"]
    print(f"median of {args.repeats} runs; target {TARGET_S:g} s for --help and bound")
    for name, seconds in reference.items():
        print(f"  reference {name:<32} {seconds:6.2f} s")
    for name, argv in COMMANDS.items():
        seconds = median_seconds(argv, args.repeats)
        print(
            f"  {name:<42} {seconds:6.2f} s   {seconds / TARGET_S:5.2f}× target   {seconds / eager:5.2f}× eager imports"
        )


if __name__ == "__main__":
    main()
