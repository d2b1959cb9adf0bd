"""bench/compare.py, the report that shows a slip the day it happens: every recorded ratio against
the committed previous result, in a repository of its own."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _results(speedup: float, roofline: float) -> str:
    return (
        "# bench/x\n\n- date: 2026-12-07\n\n```\nfigures\n```\n\n## Ratios\n\n| ratio | value | better |\n"
        f"|---|---|---|\n| speed-up | {speedup} | higher |\n| over the roofline | {roofline} | lower |\n"
    )


def _committed(tmp_path: Path, text: str) -> tuple[Path, list[str]]:
    """A repository of its own holding bench/record.py, bench/compare.py and one results file
    ``text``, committed: the file's path and the git command line for the repository."""
    (tmp_path / "bench" / "results").mkdir(parents=True)
    for name in ("record.py", "compare.py"):
        shutil.copy(ROOT / "bench" / name, tmp_path / "bench" / name)
    results = tmp_path / "bench" / "results" / "x.md"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    results.write_text(text)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "before"], check=True)
    return results, git


def test_compare_lists_every_ratio_worse_by_more_than_the_tolerance(tmp_path: Path) -> None:
    results, git = _committed(tmp_path, _results(5.0, 1.40))

    def compare() -> str:
        done = subprocess.run([sys.executable, str(tmp_path / "bench" / "compare.py")], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    results.write_text(_results(4.0, 1.50))  # 20 % worse, and 7 % worse: one slip
    said = compare()
    assert "1 ratio(s) worse by more than 15%" in said and "| x | speed-up (higher is better) | 5 (" in said
    assert "20% worse" in said and "over the roofline" not in said
    subprocess.run([*git, "commit", "-qam", "after"], check=True)  # committed: compared with the one before
    assert "20% worse" in compare()
    results.write_text(_results(6.0, 1.0))
    assert "no ratio worse by more than 15% (2 compared)" in compare()


def test_compare_says_what_it_cannot_compare_and_never_hides_a_slip(tmp_path: Path) -> None:
    """Found by an outside test: a NaN, a changed direction, a dropped row and a zero before were
    each read as 'no ratio worse'; a bad revision passed as '0 compared'."""
    results, _ = _committed(tmp_path, _results(5.0, 0))

    def compare(*argv: str) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, str(tmp_path / "bench" / "compare.py"), *argv], capture_output=True, text=True
        )
        return done.returncode, done.stdout + done.stderr

    results.write_text(_results(float("nan"), 1000))  # a NaN, and a zero before that grew
    code, said = compare()
    assert code == 0 and "| x | speed-up (higher is better) | 5 (HEAD) | – | gone |" in said
    assert "inf% worse" in said and "x.md: speed-up: not a finite number" in said
    results.write_text(_results(4.0, 0).replace("| 4.0 | higher |", "| 4.0 | lower |"))
    assert "turned around" in compare()[1]
    assert compare("--against", "nosuchrev") == (
        2,
        "compare: --against nosuchrev is not a revision of this repository\n",
    )
