"""What a check of a user's code returns, and what it raises when the code fails it.

A check evaluates every case it has (so a failure report names all of them, not just the
first), then raises :class:`CheckFailed` — an ``AssertionError``, so that pytest shows it as a
failed test, not an error — whose message names the first failing case and how many failed.
Misuse of the checks themselves (a grid narrowed to nothing, a setup that returns no Opacus
optimizer) is a ``ValueError`` naming the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: how many failing cases a failure message lists.
LISTED = 3


@dataclass(frozen=True)
class Case:
    """One evaluated case of a check.

    Attributes:
      where: the case (a grid point, a sweep, a run).
      passed: whether it passed.
      why: what was measured against what was claimed.
    """

    where: str
    passed: bool
    why: str

    def line(self) -> str:
        return f"{self.where}: {self.why}"


class CheckFailed(AssertionError):
    """A user's accountant, DP-SGD setup or mechanism failed a check.

    Attributes:
        report: the :class:`Report` of every case, passed and failed, and what the check measured.
        cases: the failing cases alone, in the order the message lists them (the one that
            explains the others first).

    The message is a first line ("check_accountant: 2 of 14 cases fail:") and then one failing
    case a line, up to :data:`LISTED` of them.
    """

    def __init__(self, report: Report) -> None:
        self.report = report
        self.cases = report.failures
        listed = "".join(f"\n- {case.line()}" for case in self.cases[:LISTED])
        more = f"\n- and {len(self.cases) - LISTED} more" if len(self.cases) > LISTED else ""
        super().__init__(f"{report.check}: {len(self.cases)} of {len(report.cases)} cases fail:{listed}{more}")


@dataclass(frozen=True)
class Report:
    """Every case of one check, and what the check measured.

    Attributes:
      check: the check's name.
      cases: every case it evaluated, passed and failed.
      details: what it measured (sizes, bounds, the leak it detects).
    """

    check: str
    cases: tuple[Case, ...]
    details: dict[str, Any]

    @property
    def failures(self) -> tuple[Case, ...]:
        return tuple(case for case in self.cases if not case.passed)

    @property
    def passed(self) -> bool:
        return not self.failures

    def raise_on_failure(self) -> Report:
        """This report, or :class:`CheckFailed` when a case failed."""
        if not self.passed:
            raise CheckFailed(self)
        return self
