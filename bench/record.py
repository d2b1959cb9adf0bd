"""Where a bench's figures go: ``bench/results/NAME.md``, the one place the docs quote them from.

A results file says when, on what machine and by which command its figures were measured, then
holds the bench's table as it printed it, and, for a bench that measures ratios, a ``Ratios``
table (name, value, which way is better) that ``bench/compare.py`` reads to show a slip the day
it happens. The docs include these files at build time (``<!-- results: NAME -->`` in a page,
docs/hooks.py); ``tests/test_docs.py`` fails on a measured figure in the docs that no results file
holds.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import platform
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
#: the heading of a results file's ratio table, which bench/compare.py reads.
RATIOS = "## Ratios"


@dataclass(frozen=True)
class Ratio:
    """One measured ratio: its name (stable across runs, the key compare.py matches on), its value,
    and whether a higher or a lower value is better."""

    name: str
    value: float
    better: str  # "higher" or "lower"

    def __post_init__(self) -> None:
        if self.better not in ("higher", "lower"):
            raise ValueError(f"better must be 'higher' or 'lower', got {self.better!r}")
        if "|" in self.name:
            raise ValueError(f"a ratio's name holds no '|': {self.name!r}")


def machine() -> str:
    """The machine in one line: OS, architecture, cores, CPU model, Python and torch."""
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")
        ]
        model = names[0] if names else ""
    try:
        import torch

        torch_version = f", torch {torch.__version__}"
    except ImportError:
        torch_version = ""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{platform.system()} {platform.machine()}, {cores} cores{f' ({model})' if model else ''}, "
        f"Python {platform.python_version()}{torch_version}"
    )


def write(name: str, body: str, ratios: Sequence[Ratio] = (), *, command: str | None = None) -> Path:
    """``bench/results/NAME.md``: today's date, the machine, the command, ``body`` (Markdown: the
    bench's table or lines, as printed), then the ratios. Returns the file's path.

    Args:
        name: the bench's name (the file's stem).
        body: what the bench measured, as Markdown.
        ratios: the ratios compare.py tracks (none for a bench that measures only times).
        command: the command that made it; default this process's ``python`` command line.
    """
    if command is None:
        script = Path(sys.argv[0]).resolve()
        shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else Path(script.name)
        command = " ".join(["python", shown.as_posix(), *sys.argv[1:]])
    lines = [
        f"# bench/{name}",
        "",
        f"- date: {date.today().isoformat()}",
        f"- machine: {machine()}",
        f"- command: `{command}`",
        "",
        body.strip(),
        "",
    ]
    if ratios:
        lines += [RATIOS, "", "| ratio | value | better |", "|---|---|---|"]
        lines += [f"| {r.name} | {r.value:.3g} | {r.better} |" for r in ratios]
        lines.append("")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.md"
    path.write_text("\n".join(lines))
    print(f"results: {path.relative_to(ROOT)}")
    return path


def read_ratios(text: str) -> tuple[dict[str, Ratio], list[str]]:
    """The ratios of a results file's text (none where it has no ratio table), and one line for
    each row of its table that is not a ratio (a value that is no finite number, a direction that
    is neither higher nor lower), so that a broken row is said, never skipped."""
    if RATIOS not in text:
        return {}, []
    ratios, problems = {}, []
    for line in text.split(RATIOS, 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.strip() or cells[0] in ("ratio", "---"):
            continue
        try:
            value = float(cells[1]) if len(cells) == 3 else math.nan
            if not math.isfinite(value):
                raise ValueError(f"not a finite number of three cells: {line.strip()!r}")
            ratios[cells[0]] = Ratio(cells[0], value, cells[2])
        except ValueError as err:
            problems.append(f"{cells[0]}: {err}")
    return ratios, problems


@dataclass
class Captured:
    """What a bench printed inside :func:`captured`, and the ratios it adds to its results file."""

    ratios: list[Ratio] = field(default_factory=list)


class _Tee(io.TextIOBase):
    """stdout as it was, and a copy of everything written to it."""

    def __init__(self, shown: io.TextIOBase) -> None:
        self.shown, self.copy = shown, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.shown.write(text)

    def flush(self) -> None:
        self.shown.flush()


@contextlib.contextmanager
def captured(name: str, *, command: str | None = None) -> Iterator[Captured]:
    """Run a bench's printing body; when it finishes without an exception, write what it printed
    (as a fenced block) and the ratios it added to ``bench/results/NAME.md``. A bench that fails
    leaves the last results file as it was.

    Args:
        name: the results file's stem.
        command: as for :func:`write`.
    """
    tee, result = _Tee(sys.stdout), Captured()  # type: ignore[arg-type]
    with contextlib.redirect_stdout(tee):
        yield result
    printed = "\n".join(line.rstrip() for line in tee.copy.getvalue().strip().splitlines())
    write(name, f"```\n{printed}\n```", result.ratios, command=command)
