"""Every ratio in bench/results/*.md against the committed previous result: a slip, the day it happens.

For each results file, the "before" is the version committed at ``--against`` (default ``HEAD``);
where the file there is the same as here (a clean checkout, nothing rerun), it is the version
before the last commit that changed it. Prints one table of every ratio that got worse by more
than ``--tolerance`` (default 15 %), gone, or turned around (its better direction changed), or
says none did; then what it could not compare and why (a file with no earlier version, a row that
is no ratio); then (``--all``) every ratio. A slip is a report, not a failure: exit 0. Exit 2 only
on a bad argument or a results file it cannot read.
Usage: python bench/compare.py [--against REV] [--tolerance 0.15] [--all]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from record import RESULTS, ROOT, Ratio, read_ratios


def _git(*args: str) -> str | None:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def committed_before(path: Path, text: str, against: str) -> tuple[str, str] | None:
    """(revision, text) of the file's previous result: at ``against``, or before the last commit
    that changed it when that version is the one here; None where there is none."""
    relative = path.relative_to(ROOT).as_posix()
    there = _git("show", f"{against}:{relative}")
    if there is not None and there != text:
        return against, there
    revisions = (_git("log", "--format=%h", "-n", "2", against, "--", relative) or "").split()
    if len(revisions) < 2:
        return None
    earlier = _git("show", f"{revisions[1]}:{relative}")
    return None if earlier is None else (revisions[1], earlier)


def change(before: Ratio, now: Ratio) -> float:
    """How much worse ``now`` is than ``before``, a fraction of ``before`` (negative: better;
    infinite where ``before`` was 0 and ``now`` moved the wrong way)."""
    worse = (before.value - now.value) if now.better == "higher" else (now.value - before.value)
    if before.value == 0:
        return 0.0 if worse == 0 else math.copysign(math.inf, worse)
    return worse / abs(before.value)


@dataclass(frozen=True)
class Row:
    """One ratio of one bench, before and now (None: gone), and what moved."""

    bench: str
    name: str
    revision: str
    before: Ratio
    now: Ratio | None

    @property
    def moved(self) -> str:
        if self.now is None:
            return "gone"
        if self.now.better != self.before.better:
            return f"turned around (was '{self.before.better} is better')"
        worse = change(self.before, self.now)
        return f"{worse:.0%} worse" if worse > 0 else f"{-worse:.0%} better" if worse < 0 else "same"

    def slipped(self, tolerance: float) -> bool:
        if self.now is None or self.now.better != self.before.better:
            return True
        return change(self.before, self.now) > tolerance

    def line(self) -> str:
        now = "–" if self.now is None else f"{self.now.value:.3g}"
        cells = [
            self.bench,
            f"{self.name} ({self.before.better} is better)",
            f"{self.before.value:.3g} ({self.revision})",
        ]
        return "| " + " | ".join([*cells, now, self.moved]) + " |"


def compared(against: str) -> tuple[list[Row], list[str]]:
    """Every ratio's row, and what could not be compared (one line each)."""
    rows: list[Row] = []
    unread: list[str] = []
    for path in sorted(RESULTS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        now, problems = read_ratios(text)
        unread += [f"{path.name}: {problem}" for problem in problems]
        previous = committed_before(path, text, against)
        if previous is None:
            if now:
                unread.append(f"{path.name}: no committed earlier result to compare with")
            continue
        revision, earlier = previous
        before, _ = read_ratios(earlier)
        rows += [Row(path.stem, name, revision, ratio, now.get(name)) for name, ratio in before.items()]
    return rows, unread


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="the revision whose results are 'before'")
    parser.add_argument("--tolerance", type=float, default=0.15, help="a ratio worse by more than this is listed")
    parser.add_argument("--all", action="store_true", help="also print every ratio compared")
    args = parser.parse_args()
    if not 0 <= args.tolerance < 10:
        print(f"compare: --tolerance must be in [0, 10), got {args.tolerance}", file=sys.stderr)
        return 2
    if _git("rev-parse", "--verify", "--quiet", f"{args.against}^{{commit}}") is None:
        print(f"compare: --against {args.against} is not a revision of this repository", file=sys.stderr)
        return 2
    try:
        rows, unread = compared(args.against)
    except UnicodeDecodeError as err:
        print(f"compare: a results file is not UTF-8 text ({err.reason})", file=sys.stderr)
        return 2
    header = "| bench | ratio | before (rev) | now | change |\n|---|---|---|---|---|"
    slipped = [row for row in rows if row.slipped(args.tolerance)]
    if slipped:
        print(f"{len(slipped)} ratio(s) worse by more than {args.tolerance:.0%}, gone or turned around:\n{header}")
        print("\n".join(row.line() for row in slipped))
    else:
        print(f"no ratio worse by more than {args.tolerance:.0%} ({len(rows)} compared)")
    if unread:
        print("\nnot compared:\n" + "\n".join(f"- {line}" for line in unread))
    if args.all and rows:
        print(f"\nevery ratio compared:\n{header}")
        print("\n".join(row.line() for row in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
