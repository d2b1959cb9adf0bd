"""A pipeline's (or recovery grid's) wall time as a user runs it (a fresh output folder, the
command line), with N local workers against one, and optionally on a Dask cluster (a
LocalCluster of N single-threaded workers, reached by address like a remote one); and whether
every run gives the same numbers.

Target (issue #23): pipeline/factorial.toml within 45 minutes on 2 cores. The last line prints
the ratio of the one-worker wall time to the N-worker one, and `identical` when every run's
result files (rows.csv or results.csv and mixtures.json; recovery.json) are byte-identical.
Usage: python bench/pipeline_workers.py [SPEC] [--command pipeline|recovery] [--workers N]
       [--no-single] [--dask]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import record

TARGET_SECONDS = 45 * 60


def _run(command: str, spec: str, out: Path, backend: list[str]) -> float:
    start = time.perf_counter()
    argv = [sys.executable, "-m", "dpaudit_mix.cli", command, spec, "--out", str(out), *backend]
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def _outputs(out: Path) -> list[bytes]:
    if (out / "recovery.json").exists():
        return [(out / "recovery.json").read_bytes()]
    table = out / "rows.csv" if (out / "rows.csv").exists() else out / "results.csv"
    return [table.read_bytes(), (out / "mixtures.json").read_bytes()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("spec", nargs="?", default="pipeline/factorial.toml")
    parser.add_argument("--command", choices=("pipeline", "recovery"), default="pipeline")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-single", action="store_true", help="time only the N-worker run")
    parser.add_argument("--dask", action="store_true", help="also run on a LocalCluster of N workers")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, {args.command} {args.spec}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        many = _run(args.command, args.spec, root / "many", ["--workers", str(args.workers)])
        print(f"{args.workers} workers: {many:.0f} s ({many / TARGET_SECONDS:.2f} of the 45-minute target)")
        runs = ["many"]
        if args.dask:
            from dask.distributed import LocalCluster

            with LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as cluster:
                address = cluster.scheduler_address
                dask = _run(args.command, args.spec, root / "dask", ["--backend", "dask", "--scheduler", address])
            print(f"dask ({args.workers} workers): {dask:.0f} s")
            runs.append("dask")
        if not args.no_single:
            one = _run(args.command, args.spec, root / "one", [])
            print(f"1 worker: {one:.0f} s")
            runs.append("one")
        same = all(_outputs(root / run) == _outputs(root / runs[0]) for run in runs)
        verdict = "identical" if same else "DIFFERENT"
        if args.no_single:
            print(f"{verdict} results ({', '.join(runs)})")
        else:
            print(f"speed-up {one / many:.2f}x with {args.workers} workers, {verdict} results ({', '.join(runs)})")


if __name__ == "__main__":
    with record.captured("pipeline_workers"):
        main()
