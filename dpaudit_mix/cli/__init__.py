"""The `dpaudit-mix` command line (docs/design.md §4).

Exit 0 success, 2 bad input, 3 audit violation (or a refused release / failed check), 4 an
inconclusive audit (a σ = 0 control saw nothing, so the audit cannot see leakage), 5 a fault of
the machine (disk full, I/O error, stdout closed), 130 interrupted (Ctrl-C; rerun to resume). An
exception of any type raised inside a user's registered object (accountant, mechanism, world,
network, threshold strategy) is bad input too: exit 2, one line naming it.

One module per command group (:mod:`.mixing`, :mod:`.audits`, :mod:`.planning`, :mod:`.releases`,
:mod:`.experiments`, :mod:`.verify`), each with its handlers and its ``commands(sub)``;
:mod:`.common` holds what they share. Each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
from collections.abc import Sequence

from ..base.errors import EXIT_BAD_INPUT, EXIT_FAULT, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_VIOLATION, InputError
from ..base.registry import user_code
from ..base.version import __version__
from . import audits, experiments, mixing, planning, releases, verify
from .common import PATH_ERRORS, Parser

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAULT",
    "EXIT_INCONCLUSIVE",
    "EXIT_INTERRUPTED",
    "EXIT_VIOLATION",
    "build_parser",
    "main",
]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="dpaudit-mix",
        description=__doc__,
        epilog="examples:\n  dpaudit-mix audit-scores --help\n  make demo  # from a fresh clone: the demo's report",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for group in (mixing, audits, planning, releases, experiments, verify):
        group.commands(sub)
    return parser


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a closed or full stdout does not
    add a traceback to the one line already said."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)


def _noted(exc: BaseException) -> str:
    """What a failure's notes add to its one line (a release's fault: what stays reserved)."""
    notes = getattr(exc, "__notes__", None) or []
    return "".join(f"; {note}" for note in notes)


def main(argv: Sequence[str] | None = None) -> int:
    """Every failure ends in one line on stderr and its exit code (see the module docstring)."""
    for text in (sys.stdout, sys.stderr):  # a non-UTF-8 locale must not turn "λ" into a traceback
        if hasattr(text, "reconfigure"):
            text.reconfigure(errors="backslashreplace")
    try:
        args = build_parser().parse_args(argv)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed or full stdout fails here, inside the handlers below
        return code
    except InputError as exc:
        _say(f"dpaudit-mix: error: {exc}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        _say(
            "dpaudit-mix: interrupted; finished chunks and stages are kept: rerun the same command to resume"
            + _noted(exc)
        )
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        _say("dpaudit-mix: error: stdout was closed before the output was written")
        return EXIT_FAULT
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) or exc.filename is None:
            _silence_stdout()
        _say(f"dpaudit-mix: error: {exc.strerror or exc}{where}; nothing half-written was kept{_noted(exc)}")
        return EXIT_BAD_INPUT if exc.errno in PATH_ERRORS and exc.filename else EXIT_FAULT
    except MemoryError as exc:
        _say("dpaudit-mix: error: out of memory; ask for fewer runs, examples or steps" + _noted(exc))
        return EXIT_FAULT
    except Exception as exc:
        # a user's registered accountant, mechanism, world, network or threshold rule failed: one line
        # naming it (their input to us); a failure of the package's own code keeps its traceback
        culprit = user_code(exc)
        if culprit is None:
            raise
        _say(f"dpaudit-mix: error: {culprit} raised {type(exc).__name__}: {exc}")
        return EXIT_BAD_INPUT
