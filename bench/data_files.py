"""Building a problem from a user's files at scale (issue target: 20 sources × 50,000 images of
64 × 64 within the machine's memory): synthetic uint8 ``.npz`` files made here, then
``dpaudit-mix problem --data`` in a child process; prints its wall time and peak RSS against
the machine's memory.

    python bench/data_files.py                        # 20 × 50,000 of 64 × 64, sensitive 10,000
    python bench/data_files.py --sources 4 --images 5000   # a quick look
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import record

from dpaudit_mix.base.randomness import stream
from dpaudit_mix.base.resources import available_bytes


def _write(path: Path, count: int, size: int, seed: int) -> None:
    """Images whose mean brightness says the class (so the proxies learn something), in chunks."""
    draws = stream(seed, "synthetic-inputs", bench="data-files", count=count).numpy()
    labels = draws.integers(10, size=count)
    images = np.empty((count, size, size), dtype=np.uint8)
    for start in range(0, count, 5000):
        part = slice(start, start + 5000)
        noise = draws.random((len(labels[part]), size, size)) * 128
        images[part] = (noise + 12 * labels[part][:, None, None]).astype(np.uint8)
    np.savez(path, images=images, labels=labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=20)
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--sensitive", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpaudit-data-bench-") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        _write(root / "sensitive.npz", args.sensitive, args.size, 0)
        lines = ['kind = "image"', 'sensitive = "sensitive.npz"', "[sources]"]
        for s in range(args.sources):
            _write(root / f"s{s}.npz", args.images, args.size, s + 1)
            lines.append(f's{s} = "s{s}.npz"')
        (root / "data.toml").write_text("\n".join(lines) + "\n")
        made = time.perf_counter() - start
        size = sum(p.stat().st_size for p in root.glob("*.npz"))
        command = [sys.executable, "-m", "dpaudit_mix.cli", "problem", "--data", str(root / "data.toml")]
        command += ["--task", "multiclass", "--out", str(root / "problem.npz")]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"problem --data failed ({done.returncode}): {done.stderr.strip()}")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux: KiB
        memory = available_bytes() or 0
    shape = f"{args.size}×{args.size} uint8"
    print(f"| files | {args.sources} sources × {args.images:,} + {args.sensitive:,} sensitive, {shape}, ", end="")
    print(f"{size / 2**30:.2f} GiB (made in {made:.0f} s) |")
    print("| measure | value |")
    print("|---|---|")
    print(f"| problem --data wall time | {wall:.0f} s |")
    print(f"| peak RSS | {peak / 2**30:.2f} GiB |")
    print(f"| peak RSS / available memory | {peak / memory:.2f} |" if memory else "| available memory | unknown |")


if __name__ == "__main__":
    with record.captured("data_files"):
        main()
