"""Run the checks on the shipped mechanism (and, for ``--self-test``, on every mutant); write
verify.json and verify.md.

A mutant is *caught* when at least one check fails on it. Checks that exercise none of the
parts a mutant breaks would give the honest result again, so the self-test reuses it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..base.atomic import write_json, write_text
from ..base.errors import require
from .checks import CHECKS, LEVELS, Check, CheckResult, Level
from .variants import HONEST, MUTANTS, Variant


def checks_for(parts: frozenset[str] | None) -> tuple[Check, ...]:
    """The checks that exercise nothing but ``parts`` of a release (None: every check)."""
    return CHECKS if parts is None else tuple(c for c in CHECKS if c.uses <= parts)


def run_checks(
    variant: Variant,
    level: Level,
    shipped: dict[str, CheckResult] | None = None,
    progress: bool = False,
    parts: frozenset[str] | None = None,
) -> dict[str, CheckResult]:
    """Every check on ``variant`` (or those of ``parts``: :func:`checks_for`); with the
    ``shipped`` variant's results, a check that exercises none of the parts the variant breaks
    would give the same result, and is reused."""
    results = {}
    chosen = checks_for(parts)
    bar = tqdm(chosen, desc=f"verify {variant.name}", unit="check", disable=not progress, file=sys.stderr)
    for check in bar:
        if shipped is not None and not (check.uses & variant.breaks):
            results[check.name] = shipped[check.name]
            continue
        start = time.perf_counter()
        result = check.run(variant, level)
        results[check.name] = replace(result, seconds=round(time.perf_counter() - start, 2))
    return results


@dataclass(frozen=True)
class MutantResult:
    """One mutant of the self-test: which checks caught it, and what each saw."""

    name: str
    description: str
    breaks: tuple[str, ...]
    caught_by: tuple[str, ...]
    evidence: dict[str, str]

    @property
    def caught(self) -> bool:
        return bool(self.caught_by)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "breaks": list(self.breaks),
            "caught": self.caught,
            "caught_by": list(self.caught_by),
            "evidence": dict(self.evidence),
        }


@dataclass(frozen=True)
class SelfTest:
    """Every mutant's result: the command fails unless all are caught."""

    mutants: tuple[MutantResult, ...]

    @property
    def caught(self) -> int:
        return sum(m.caught for m in self.mutants)

    @property
    def kill_rate(self) -> float:
        return self.caught / len(self.mutants)

    def to_dict(self) -> dict[str, Any]:
        return {"kill_rate": self.kill_rate, "caught": self.caught, "mutants": [m.to_dict() for m in self.mutants]}


@dataclass(frozen=True)
class Verification:
    """What verify-accountant found (verify.json is :meth:`to_dict`): the checks on the shipped
    variant, and with ``--self-test`` the mutants'."""

    level: str
    checks: tuple[CheckResult, ...]
    seconds: float
    self_test: SelfTest | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def failures(self) -> list[str]:
        """One line per failed check, and per mutant that no check caught."""
        lines = [f"check {c.name} FAILED: {c.summary}" for c in self.checks if not c.passed]
        if self.self_test is not None:
            lines += [
                f"mutant {m.name} ({m.description}) was NOT caught by any check"
                for m in self.self_test.mutants
                if not m.caught
            ]
        return lines

    def to_dict(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "level": self.level,
            "passed": self.passed,
            "checks": [asdict(c) for c in self.checks],
        }
        if self.self_test is not None:
            summary["self_test"] = self.self_test.to_dict()
        summary["seconds"] = self.seconds
        return summary


def verify(
    level: Level | str = "quick", self_test: bool = False, progress: bool = True, parts: frozenset[str] | None = None
) -> Verification:
    """The checks on the shipped code, then (``self_test``) on every mutant.

    Args:
      level: a ``Level`` or its name (``"quick"``, ``"full"``).
      self_test: also run every check on every mutant, each of which must be caught.
      progress: show a progress bar.
      parts: keep only the checks of these parts of a release (a release verifies what it
        releases: λ's, the accountant and the learner).

    Returns:
      The ``Verification``: every check's result (``failures()`` lists what failed).

    Raises:
      InputError: an unknown level or part."""
    if isinstance(level, str):
        require(level in LEVELS, f"unknown verification level {level!r}; choose from {', '.join(LEVELS)}")
        level = LEVELS[level]
    start = time.perf_counter()
    shipped = run_checks(HONEST, level, progress=progress, parts=parts)
    mutants = None
    if self_test:
        found = []
        for mutant in MUTANTS:
            results = run_checks(mutant, level, shipped, progress=progress, parts=parts)
            caught_by = tuple(name for name, r in results.items() if not r.passed)
            evidence = {name: results[name].summary for name in caught_by}
            found.append(
                MutantResult(mutant.name, mutant.description, tuple(sorted(mutant.breaks)), caught_by, evidence)
            )
        mutants = SelfTest(tuple(found))
    return Verification(level.name, tuple(shipped.values()), round(time.perf_counter() - start, 1), mutants)


def _markdown(verification: Verification) -> str:
    verdict = "PASS" if not verification.failures() else "FAIL"
    summary = verification.to_dict()
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


def write_verification(verification: Verification, out: Path) -> None:
    write_json(out / "verify.json", verification.to_dict())
    write_text(out / "verify.md", _markdown(verification))
