"""What every command shares: the parser that turns a usage error into exit 2, JSON output, the
argument types, and the options several commands take (backend, device, JSON)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

from .. import accounting
from ..base.atomic import write_json
from ..base.backend import BACKENDS, Backend
from ..base.errors import InputError, require
from ..models.device import DEVICES

# Each command imports what it needs when it runs: torch, opacus, pandas and seaborn take seconds
# to load, and `--help` or `bound` should not wait for them (bench/startup.py measures this).

#: errors of a path the user gave (exit 2); any other OSError is the machine's fault (exit 5).
PATH_ERRORS = {
    errno.ELOOP,
    errno.ENAMETOOLONG,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOENT,
    errno.EEXIST,
}


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that states every option's default (where its text does not already), and examples
    in the epilog kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit 2 like every other bad input,
    and the help states defaults (:class:`HelpFormatter`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(message)


def command(sub: argparse._SubParsersAction[Parser], name: str, summary: str, *examples: str) -> Parser:
    """A subcommand with its one-line ``summary`` (its help in the command list and its
    description) and ``examples`` in its epilog, each a whole command line."""
    lines = "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=summary, description=summary.replace("%%", "%"), epilog=f"examples:\n{lines}")


#: the claim's numbers, said the same way by every command that takes them.
EPSILON_HELP = "the claimed epsilon (privacy loss, in nats)"
DELTA_HELP = "the claim's delta (a probability, e.g. 1e-5)"
NOISE_HELP = "noise multiplier sigma (noise std over the clipping norm C; unitless)"
SAMPLE_RATE_HELP = "Poisson sampling rate q of each step (a fraction in (0, 1])"
STEPS_HELP = "DP-SGD steps T (a count)"
CONFIDENCE_HELP = "the level every bound holds at (a probability)"


def emit(result: dict[str, Any], out: str | None) -> None:
    """JSON on stdout; with ``out``, the JSON goes to that file and stdout gets a short summary
    (lists longer than a few entries are left out of it)."""
    if out:
        write_json(out, result)
        result = {
            "out": out,
            **{key: value for key, value in result.items() if not (isinstance(value, list) and len(value) > 64)},
        }
    print(json.dumps(result, indent=2))


def integer(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its message
    return parse


positive_int, count, seed_number = integer(1), integer(0), integer(0)


def finite(text: str) -> float:
    """An argparse type: a finite float (ranges are checked where the value is used)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


ACCOUNTANT_HELP = "the accountant that calibrates sigma: rdp, prv, pld (default) or a registered one"


def add_backend(parser: argparse.ArgumentParser, what: str) -> None:
    """--workers, --backend and --scheduler: where the command's independent {what} run (same results)."""
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help=f"local processes running the {what} side by side (same results)",
    )
    parser.add_argument(
        "--backend", choices=BACKENDS, default="local", help=f"run the {what} here or on a Dask cluster"
    )
    parser.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://host:8786 (with --backend dask)")


def add_device(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--device",
        choices=DEVICES,
        help=f"where {what} compute (default: the spec's device key, cpu); auto takes CUDA when present",
    )


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="JSON on stdout (always on; accepted for scripts)")


@contextlib.contextmanager
def connected_backend(args: argparse.Namespace) -> Iterator[Backend]:
    """The command's backend, connected (an unreachable scheduler is exit 2 before anything is
    written) and closed when the command ends."""
    backend = Backend.connect(args.backend, args.scheduler, args.workers)
    try:
        yield backend
    finally:
        backend.close()


def add_claim(parser: argparse.ArgumentParser, phase_help: str) -> None:
    """--epsilon and --delta (required), and the claimed phase's --noise-multiplier, --sample-rate
    and --steps (all three or none: :func:`phases_of` reads them)."""
    parser.add_argument("--epsilon", type=finite, required=True, help=EPSILON_HELP)
    parser.add_argument("--delta", type=finite, required=True, help=DELTA_HELP)
    parser.add_argument("--noise-multiplier", type=finite, help=phase_help)
    parser.add_argument("--sample-rate", type=finite, help=f"{SAMPLE_RATE_HELP}, of the claimed phase")
    parser.add_argument("--steps", type=positive_int, help=f"{STEPS_HELP}, of the claimed phase")


def phases_of(args: argparse.Namespace) -> list[accounting.GaussianPhase] | None:
    """The claimed phase of --noise-multiplier, --sample-rate and --steps: all three, or none."""
    phase = (args.noise_multiplier, args.sample_rate, args.steps)
    require(
        all(v is None for v in phase) or all(v is not None for v in phase),
        "give all of --noise-multiplier, --sample-rate and --steps (the mechanism's phase), or none",
    )
    return None if args.steps is None else [accounting.GaussianPhase(*phase)]
