"""Bad input (the one exception type the CLI turns into exit 2) and every command's exit codes."""

from typing import TypeVar

import numpy as np

T = TypeVar("T")

EXIT_OK = 0
EXIT_BAD_INPUT = 2  # one line on stderr, nothing written
EXIT_VIOLATION = 3  # an audit violation, a refused release or a failed check
EXIT_INCONCLUSIVE = 4  # a σ = 0 control saw nothing: the audit cannot see leakage
EXIT_FAULT = 5  # the machine's fault: a full disk, an I/O error, a closed stdout
EXIT_INTERRUPTED = 130  # Ctrl-C: finished chunks and stages are kept


class InputError(ValueError):
    """Invalid user input: a bad flag, a malformed file, an impossible parameter."""


def is_real(value: object) -> bool:
    """A real number (int or float, numpy's too, never bool): what a numeric argument must be
    before it is compared."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def present(value: T | None, message: str) -> T:
    """``value``, or :class:`InputError` with ``message`` when it is missing (None)."""
    if value is None:
        raise InputError(message)
    return value


def require(condition: bool, message: str) -> None:
    """Raise :class:`InputError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise InputError(message)
