"""What `dpaudit-mix audit-scores` holds in memory and how long it takes on large score files,
against its targets (peak RSS ≤ 2 × the inflated scores + 300 MB; 10⁷ random scores a class in
≤ 60 s) and against the estimate its input guard uses (:func:`dpaudit_mix.audit.many_run.score_file.working_bytes`).

Each case is one `audit-scores` process, as a user runs it; its peak RSS is the child's
``ru_maxrss``, its time the wall clock and the child's user + sys CPU. The files are compressed
(zeros inflate ~1000×), written to a temporary folder first.

    python bench/score_memory.py                    # 2 × 10⁸ zeros, 10⁷ N(0.1, 1) vs N(0, 1) a class
    python bench/score_memory.py --threshold split  # the same under the split rule (slow: its power)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import record

from dpaudit_mix.audit.many_run.score_file import working_bytes
from dpaudit_mix.base import npz
from dpaudit_mix.base.randomness import stream

#: (name, scores a class, how they are drawn)
CASES = (("zeros", 10**8, "zeros"), ("random", 10**7, "random"))
MARGIN = 300 * 2**20


def _write(path: Path, per_class: int, kind: str) -> None:
    if kind == "zeros":
        scores_in, scores_out = np.zeros(per_class), np.zeros(per_class)
    else:
        draws = stream(0, "simulated-scores", bench="score-memory", per_class=per_class).numpy()
        scores_in, scores_out = draws.normal(0.1, 1, per_class), draws.normal(0, 1, per_class)
    np.savez_compressed(path, in_scores=scores_in, out_scores=scores_out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threshold", default="bonferroni")
    args = parser.parse_args()
    print("| case | scores | data GiB | peak RSS GiB | target GiB | peak / target | guard GiB | wall s | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, per_class, kind in CASES:
            path = Path(tmp) / f"{name}.npz"
            _write(path, per_class, kind)
            data = 2 * per_class * 8
            estimate = working_bytes(args.threshold)(npz.headers(path.read_bytes(), name))
            started = time.perf_counter()
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dpaudit_mix.cli",
                    "audit-scores",
                    str(path),
                    "--epsilon",
                    "1",
                    "--delta",
                    "1e-5",
                ]
                + ["--threshold", args.threshold],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            stderr = child.stderr.read() if child.stderr else ""
            _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage
            child.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - started
            cpu, peak = usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024  # KiB on Linux
            target = 2 * data + MARGIN
            print(
                f"| {name} | 2 × {per_class:.0e} | {data / 2**30:.2f} | {peak / 2**30:.2f} | {target / 2**30:.2f} | "
                f"{peak / target:.2f} | {estimate / 2**30:.2f} | {wall:.1f} | {cpu:.1f} |"
            )
            for line in stderr.splitlines():
                if "warning" in line or "verdict" in line or "error" in line:
                    print(f"    exit {child.returncode}: {line}")
            path.unlink()


if __name__ == "__main__":
    with record.captured("score_memory"):
        main()
