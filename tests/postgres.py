"""A real PostgreSQL server for the ledger's tests: Debian's PostgreSQL 15, started as the
``postgres`` user in a temporary folder, on a loopback port of its own, once per test process.

Where no server can start (no binaries, no ``postgres`` user) a PostgreSQL case skips with one
line, except under ``CI=true``: there, `.ci/run` makes sure one can, and a case that cannot
start one fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BIN = Path(os.environ.get("DPAUDIT_MIX_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _as_postgres(*command: str) -> list[str]:
    """``command`` run as the postgres user (this process is root on the test machines)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else list(command)


def unavailable() -> str | None:
    """Why no server can start here, or None."""
    if not (BIN / "initdb").is_file():
        return f"no PostgreSQL binaries in {BIN}"
    if os.geteuid() == 0 and (
        shutil.which("runuser") is None or subprocess.run(["id", "postgres"], capture_output=True).returncode
    ):
        return "no postgres user to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server() -> Iterator[str]:
    """A running server; yields its base URL (``postgresql://postgres@127.0.0.1:PORT``)."""
    why = unavailable()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL cannot start under CI: {why}")
        pytest.skip(f"PostgreSQL: {why}")
    folder = Path(tempfile.mkdtemp(prefix="dpaudit-mix-pg-"))
    folder.chmod(0o755)
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(sockets, "postgres")
    port = _free_port()
    run = lambda *command: subprocess.run(_as_postgres(*command), check=True, capture_output=True, text=True)  # noqa: E731
    try:
        run(str(BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(str(BIN / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start")
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL did not start: {exc.stderr.strip()}")
        pytest.skip(f"PostgreSQL did not start: {exc.stderr.strip().splitlines()[-1:]}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"), capture_output=True
        )
        shutil.rmtree(folder, ignore_errors=True)


def fresh_database(base: str) -> str:
    """A new, empty database on the server at ``base``; its URL."""
    import psycopg

    name = f"ledger_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return f"{base}/{name}"
