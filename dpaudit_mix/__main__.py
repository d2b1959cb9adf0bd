"""``dpaudit-mix`` and ``python -m dpaudit_mix``: the command line's entry point.

A command that does no multi-threaded linear algebra (help, ``bound``, ``account``,
``calibrate``, ``check-release``) runs with one BLAS thread unless the caller set
``OPENBLAS_NUM_THREADS``: OpenBLAS starts a thread per core when numpy and scipy load, and those
threads' start-up was 0.2 s of ``bound``'s 0.7 s of CPU on 2 cores (``bench/startup.py``). Every
other command keeps the library's default.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

#: the subcommands that never multiply large matrices.
LIGHT = frozenset({"bound", "account", "calibrate", "check-release"})


def light(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for help, or for a command in LIGHT."""
    if not argv or any(a in ("-h", "--help") for a in argv):
        return True
    command = next((a for a in argv if not a.startswith("-")), None)
    return command in LIGHT


def main() -> int:
    if light(sys.argv[1:]):
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from .cli import main as run  # numpy loads here, after the thread count is chosen

    return run()


if __name__ == "__main__":
    sys.exit(main())
