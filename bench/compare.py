"""Every ratio in bench/results/*.md against the committed previous result: a slip, the day it happens.

For each results file, the "before" is the version committed at ``--against`` (default ``HEAD``);
where the file there is the same as here (a clean checkout, nothing rerun), it is the version
before the last commit that changed the file. Prints one table of every ratio that got worse by
more than ``--tolerance`` (default 15 %), or says none did, then (``--all``) every ratio. It never
fails on a slip (exit 0): it is a report, not a test; exit 2 only on a bad argument or a results
file it cannot read. Usage: python bench/compare.py [--against REV] [--tolerance 0.15] [--all]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from record import RESULTS, ROOT, Ratio, read_ratios


def _git(*args: str) -> str | None:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def committed_before(path: Path, against: str) -> tuple[str, str] | None:
    """(revision, text) of the file's previous result: at ``against``, or before the last commit
    that changed it when that version is the one here; None where there is none."""
    relative = path.relative_to(ROOT).as_posix()
    text = _git("show", f"{against}:{relative}")
    if text is not None and text != path.read_text():
        return against, text
    revisions = (_git("log", "--format=%h", "-n", "2", against, "--", relative) or "").split()
    if len(revisions) < 2:
        return None
    earlier = _git("show", f"{revisions[1]}:{relative}")
    return None if earlier is None else (revisions[1], earlier)


def change(before: Ratio, now: Ratio) -> float:
    """How much worse ``now`` is than ``before`` (a fraction; negative: better)."""
    if before.value == 0:
        return 0.0
    worse = (before.value - now.value) if now.better == "higher" else (now.value - before.value)
    return worse / abs(before.value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="the revision whose results are 'before'")
    parser.add_argument("--tolerance", type=float, default=0.15, help="a ratio worse by more than this is listed")
    parser.add_argument("--all", action="store_true", help="also print every ratio compared")
    args = parser.parse_args()
    if not 0 <= args.tolerance < 10:
        print(f"compare: --tolerance must be in [0, 10), got {args.tolerance}", file=sys.stderr)
        return 2
    rows = []
    for path in sorted(RESULTS.glob("*.md")):
        now = read_ratios(path.read_text())
        previous = committed_before(path, args.against) if now else None
        if previous is None:
            continue
        revision, text = previous
        before = read_ratios(text)
        for name, ratio in now.items():
            if name in before:
                rows.append((path.stem, name, revision, before[name], ratio, change(before[name], ratio)))
    header = "| bench | ratio | before (rev) | now | change |\n|---|---|---|---|---|"

    def line(row: tuple[str, str, str, Ratio, Ratio, float]) -> str:
        bench, name, revision, before, now, worse = row
        moved = f"{worse:.0%} worse" if worse > 0 else f"{-worse:.0%} better" if worse < 0 else "same"
        cells = [bench, f"{name} ({now.better} is better)", f"{before.value:.3g} ({revision})", f"{now.value:.3g}"]
        return "| " + " | ".join([*cells, moved]) + " |"

    slipped = [row for row in rows if row[5] > args.tolerance]
    if slipped:
        print(f"{len(slipped)} ratio(s) worse by more than {args.tolerance:.0%}:\n{header}")
        print("\n".join(line(row) for row in slipped))
    else:
        print(f"no ratio worse by more than {args.tolerance:.0%} ({len(rows)} compared)")
    if args.all and rows:
        print(f"\nevery ratio compared:\n{header}")
        print("\n".join(line(row) for row in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
