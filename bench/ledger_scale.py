"""Benchmark: the ledger at a long history, on SQLite and PostgreSQL.

1,000 releases (reserve + commit, one configuration: σ = 1, q = 0.01, T = 100) on one data set,
then a cap; then the time of one more reservation (its budget check composes the whole history),
of `ledger show` and of `ledger verify` (every link and signature, and every recorded spend
recomputed). Each backend runs in a process of its own, so no answer is cached from the other.
The reference is the composition the JSON ledger ran under its lock at every reservation, phase
by phase (what made `ledger show` take 9.6 s at 50 releases and 82 s at 400), timed here at 50
and 400 in the same run.

    python bench/ledger_scale.py [--releases 1000]

Targets (issue: one budget for a team): a reservation ≤ 2 s and `ledger show` ≤ 5 s at 1,000.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import record

from dpaudit_mix import accounting
from dpaudit_mix.cli import main
from dpaudit_mix.release import ledger

PHASE = accounting.GaussianPhase(1.0, 0.01, 100)
DELTA, CAP = 1e-5, 1000.0


def _release(where: str, index: int, cap: float | None) -> None:
    reservation = ledger.reserve(
        where,
        data_sha256="d" * 64,
        problem_sha256="f" * 64,
        epsilon=0.5,
        delta=DELTA,
        phase=PHASE,
        user_level=False,
        timestamp=f"t{index}",
        budget=cap,
        kind="lambda",
        identity="sensitive",
    )
    ledger.commit(where, reservation, f"{index:064x}")


def _timed(step: Callable[[], object]) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def _quietly(argv: list[str]) -> int:
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        return main(argv)


def measure(where: str, releases: int) -> dict[str, float]:
    """The history filled uncapped (no composition per release: only the rows), then capped (a
    signed cap row), then one more release, whose reservation composes the whole history."""
    fill = _timed(lambda: [_release(where, i, None) for i in range(releases)])
    ledger.set_budget(where, "d" * 16, CAP, "capped")
    reserve = _timed(lambda: _release(where, releases, CAP))
    show = _timed(lambda: _quietly(["ledger", "show", "--ledger", where]))
    verify = _timed(lambda: _quietly(["ledger", "verify", "--ledger", where]))
    assert ledger.verify_chain(where)[1] is None
    return {"fill": fill, "reserve": reserve, "show": show, "verify": verify}


def in_child(where: str, releases: int) -> dict[str, float]:
    """:func:`measure` in a fresh process (forked before anything was composed here)."""
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        return pool.apply(measure, (where, releases))


def reference(count: int) -> str:
    """The JSON ledger's composition at a reservation: every phase composed one after another
    (what the accountant's per-call limit stops, it says so)."""
    from dpaudit_mix.base.errors import InputError

    try:
        return f"{_timed(lambda: accounting.epsilon([PHASE] * count, DELTA)):.1f} s"
    except InputError as exc:
        return f"over the accountant's per-call limit ({str(exc).split('did not finish in ')[-1].split(';')[0]})"


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        os.environ["XDG_STATE_HOME"] = state
        rows = [("SQLite", in_child(str(Path(state) / "ledger.sqlite"), args.releases))]
        from tests.postgres import fresh_database, server

        try:
            with server() as base:
                rows.append(("PostgreSQL", in_child(fresh_database(base), args.releases)))
        except BaseException as exc:  # pytest's skip outside pytest: no server here
            print(f"PostgreSQL: not measured ({type(exc).__name__}: {exc})")
    print(f"{args.releases} releases on one data set (σ = 1, q = 0.01, T = 100 each), seconds:")
    print("| backend | fill (all releases) | one more reservation | ledger show | ledger verify |")
    print("|---|---|---|---|---|")
    for name, found in rows:
        print(
            f"| {name} | {found['fill']:.1f} | {found['reserve']:.3f} | {found['show']:.3f} | {found['verify']:.1f} |"
        )
    old = {n: reference(n) for n in (50, 400)}
    print(
        "reference (the JSON ledger's phase-by-phase composition at one reservation, same machine): "
        f"50 releases {old[50]}, 400 releases {old[400]}"
    )


if __name__ == "__main__":
    with record.captured("ledger_scale"):
        main_bench()
