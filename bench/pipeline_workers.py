"""A pipeline spec's wall time as a user runs it (a fresh output folder, `dpaudit-mix pipeline`),
with N workers against one, and whether both give the same numbers.

Target (issue #23): pipeline/factorial.toml within 45 minutes on 2 cores. The last line prints
the ratio of the one-worker wall time to the N-worker one, and `identical` when both runs'
rows.csv / results.csv and mixtures.json are byte-identical.
Usage: python bench/pipeline_workers.py [SPEC] [--workers N] [--no-single]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 45 * 60


def _run(spec: str, out: Path, workers: int) -> float:
    start = time.perf_counter()
    command = [sys.executable, "-m", "dpaudit_mix.cli", "pipeline", spec, "--out", str(out), "--workers", str(workers)]
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def _outputs(out: Path) -> list[bytes]:
    table = out / "rows.csv" if (out / "rows.csv").exists() else out / "results.csv"
    return [table.read_bytes(), (out / "mixtures.json").read_bytes()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("spec", nargs="?", default="pipeline/factorial.toml")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-single", action="store_true", help="time only the N-worker run")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, {args.spec}")
    with tempfile.TemporaryDirectory() as tmp:
        many = _run(args.spec, Path(tmp) / "many", args.workers)
        print(f"{args.workers} workers: {many:.0f} s ({many / TARGET_SECONDS:.2f} of the 45-minute target)")
        if args.no_single:
            return
        one = _run(args.spec, Path(tmp) / "one", 1)
        same = _outputs(Path(tmp) / "many") == _outputs(Path(tmp) / "one")
        print(f"1 worker: {one:.0f} s")
        print(f"speed-up {one / many:.2f}x with {args.workers} workers, {'identical' if same else 'DIFFERENT'} results")


if __name__ == "__main__":
    main()
