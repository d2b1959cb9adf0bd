"""Run the checks on the shipped mechanism (and, for ``--self-test``, on every mutant); write
verify.json and verify.md.

A mutant is *caught* when at least one check fails on it. Checks that exercise none of the
parts a mutant breaks would give the honest result again, so the self-test reuses it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..atomic import write_json, write_text
from ..errors import require
from .checks import CHECKS, LEVELS, CheckResult, Level
from .variants import MUTANTS, SHIPPED, Variant


def run_checks(
    variant: Variant, level: Level, shipped: dict[str, CheckResult] | None = None, progress: bool = False
) -> dict[str, CheckResult]:
    """Every check on ``variant``; with the ``shipped`` variant's results, a check that exercises
    none of the parts the variant breaks would give the same result, and is reused."""
    results = {}
    bar = tqdm(CHECKS, desc=f"verify {variant.name}", unit="check", disable=not progress, file=sys.stderr)
    for check in bar:
        if shipped is not None and not (check.uses & variant.breaks):
            results[check.name] = shipped[check.name]
            continue
        results[check.name] = check.run(variant, level)
    return results


def verify(level: Level | str = "quick", self_test: bool = False, progress: bool = True) -> dict[str, Any]:
    """The verification summary (verify.json): checks on the shipped code, then the mutants.
    ``level`` is a :class:`.checks.Level` or its name ("quick", "full")."""
    if isinstance(level, str):
        require(level in LEVELS, f"unknown verification level {level!r}; choose from {', '.join(LEVELS)}")
        level = LEVELS[level]
    start = time.perf_counter()
    honest = run_checks(SHIPPED, level, progress=progress)
    summary: dict[str, Any] = {
        "level": level.name,
        "passed": all(r.passed for r in honest.values()),
        "checks": [asdict(r) for r in honest.values()],
    }
    if self_test:
        mutants: list[dict[str, Any]] = []
        for mutant in MUTANTS:
            results = run_checks(mutant, level, honest, progress=progress)
            caught_by = [name for name, r in results.items() if not r.passed]
            mutants.append(
                {
                    "name": mutant.name,
                    "description": mutant.description,
                    "breaks": sorted(mutant.breaks),
                    "caught": bool(caught_by),
                    "caught_by": caught_by,
                    "evidence": {name: results[name].summary for name in caught_by},
                }
            )
        caught = sum(m["caught"] for m in mutants)
        summary["self_test"] = {"kill_rate": caught / len(mutants), "caught": caught, "mutants": mutants}
    summary["seconds"] = round(time.perf_counter() - start, 1)
    return summary


def failures(summary: dict[str, Any]) -> list[str]:
    """One line per failed check, and per mutant that no check caught."""
    lines = [f"check {c['name']} FAILED: {c['summary']}" for c in summary["checks"] if not c["passed"]]
    if "self_test" in summary:
        lines += [
            f"mutant {m['name']} ({m['description']}) was NOT caught by any check"
            for m in summary["self_test"]["mutants"]
            if not m["caught"]
        ]
    return lines


def _markdown(summary: dict[str, Any]) -> str:
    verdict = "PASS" if not failures(summary) else "FAIL"
    lines = [
        f"# Accountant verification: {verdict}",
        "",
        f"Level `{summary['level']}`, {summary['seconds']} s.",
        "",
        "| check | result | summary |",
        "|---|---|---|",
    ]
    lines += [f"| {c['name']} | {'pass' if c['passed'] else '**FAIL**'} | {c['summary']} |" for c in summary["checks"]]
    if "self_test" in summary:
        st = summary["self_test"]
        lines += [
            "",
            f"## Mutation self-test: {st['caught']} of {len(st['mutants'])} caught (kill rate {st['kill_rate']:.0%})",
            "",
            "| mutant | what it breaks | caught by | evidence |",
            "|---|---|---|---|",
        ]
        for m in st["mutants"]:
            evidence = "; ".join(m["evidence"].values()) or "—"
            lines.append(
                f"| {m['name']} | {m['description']} | {', '.join(m['caught_by']) or '**not caught**'} | {evidence} |"
            )
    for c in summary["checks"]:
        lines += ["", f"## {c['name']}", "", "| case | result |", "|---|---|"]
        lines += [f"| {case['why']} | {'pass' if case['passed'] else '**FAIL**'} |" for case in c["cases"]]
    return "\n".join(lines) + "\n"


def write_verification(summary: dict[str, Any], out: Path) -> None:
    write_json(out / "verify.json", summary)
    write_text(out / "verify.md", _markdown(summary))
