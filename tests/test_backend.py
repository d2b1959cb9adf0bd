"""Local workers: capped by the cores and the work, and gone when the process that started them is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dpaudit_mix.base import backend
from dpaudit_mix.base.backend import Backend

PARENT = """
import os, sys, time
from dpaudit_mix.base.backend import Backend

def pid_then_sleep(i):
    print(os.getpid(), flush=True)
    time.sleep(600)

list(Backend({workers}).unordered(pid_then_sleep, [(i,) for i in range({workers})]))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie left for init to reap is gone too
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_workers_die_within_seconds_of_their_parents_kill_9() -> None:
    """Probe #32: a --workers 2 pipeline's workers and loky's helpers were alive 10 minutes
    after its parent was killed; each worker now watches its parent from its start."""
    workers = 2
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.format(workers=workers)], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    assert parent.stdout is not None
    pids = [int(parent.stdout.readline()) for _ in range(workers)]
    children = [int(p) for p in Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()]
    assert set(pids) <= set(children) and len(children) > workers  # loky's helpers too
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while any(map(_alive, children)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in children if _alive(pid)]


def test_workers_are_capped_by_the_cores_and_said_once(capsys, monkeypatch) -> None:
    monkeypatch.setattr(backend, "usable_cores", lambda: 2)
    assert Backend.connect("local", workers=10000).workers == 2
    assert Backend.connect("local", workers=2).workers == 2
    assert capsys.readouterr().err.count("--workers 10000 is more than the 2 usable cores") == 1


def _pid() -> int:
    return os.getpid()


def test_no_more_workers_than_pieces_of_work() -> None:
    """One piece on two workers runs here: no process is started for nothing."""
    assert list(Backend(2).unordered(_pid, [()])) == [(0, os.getpid())]
    assert list(Backend(2).unordered(_pid, [])) == []
