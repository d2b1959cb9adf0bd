"""Files a command wrote into a folder, recorded with their digests, so that a rerun removes only
what the last run wrote and the new one does not (a stale figure, a control's scores) and never
a user's file, a file someone changed since, or anything through a symbolic link.

The record is ``out/.NAME.owned``: one ``<sha256> <relative path>`` line per file. A file is
removed only if its path stays inside ``out`` without passing a symlink, it is a regular file,
and its bytes still hash to the recorded digest.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .atomic import write_text
from .cache import sha256
from .errors import require


def inside(out: Path, relative: str) -> Path | None:
    """``out / relative`` when it names a regular file reached through no symlink, else None."""
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or ".." in parts:
        return None
    path = out
    for part in parts:
        path = path / part
        if path.is_symlink():
            return None
    return path if path.is_file() else None


def _read(record: Path) -> dict[str, str]:
    if record.is_symlink() or not record.is_file():
        return {}
    owned = {}
    for line in record.read_text(encoding="utf-8", errors="replace").splitlines():
        digest, _, relative = line.partition(" ")
        if len(digest) == 64 and relative:
            owned[relative] = digest
    return owned


def replace(out: Path, name: str, files: Iterable[Path]) -> None:
    """Record ``files`` (just written in ``out``) as this command's, and remove what the last
    record named that is not among them, where it is still exactly what was written."""
    record = out / f".{name}.owned"
    old = _read(record)
    new = {os.path.relpath(path, out): sha256(path) for path in files}
    write_text(record, "".join(f"{digest} {relative}\n" for relative, digest in sorted(new.items())))
    for relative, digest in old.items():
        if relative in new:
            continue
        path = inside(out, relative)
        if path is not None and sha256(path) == digest:
            path.unlink()


#: the file whose lock says a command is writing the folder (it stays; the lock dies with the process).
LOCK = ".dpaudit-mix.lock"


def _busy(out: Path) -> str:
    return f"another dpaudit-mix command is writing {out}; wait for it or choose another --out"


def require_free(out: Path) -> None:
    """Refuse at once, writing nothing, when another command holds ``out``'s lock: a second
    audit learns it before it builds its problem and calibrates its σ, not after. (A shared lock,
    tried and dropped; :func:`folder_lock` still decides at the first write.)"""
    try:
        # O_NONBLOCK: a FIFO planted under the lock's name must not hang the command on its open
        fd = os.open(out / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # no folder or lock file yet (nobody holds it), or a symlink (folder_lock refuses it)
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            require(False, _busy(out))
    finally:
        os.close(fd)


@contextmanager
def folder_lock(out: Path, command: str) -> Iterator[None]:
    """One command at a time writes ``out``: a second is refused at once (exit 2), so two audits
    never mix their results in one folder. The lock file stays; the lock dies with the process."""
    out.mkdir(parents=True, exist_ok=True)
    require(not (out / LOCK).is_symlink(), f"{out}/{LOCK} is a symbolic link; refusing it")
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            require(False, _busy(out))
        yield
    finally:
        os.close(fd)


@contextmanager
def claimed(out: Path) -> Iterator[None]:
    """``out`` claimed by this process alone for as long as the block runs: a lock on the folder
    itself (no file is left in it), taken at once or refused (exit 2), released when the process
    ends however it ends. Two releases into one folder: the second is refused, nothing overwritten."""
    out.mkdir(parents=True, exist_ok=True)
    require(not out.is_symlink(), f"{out} is a symbolic link; refusing it")
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            require(False, f"{out} is being released into by another command; wait for it, or choose another --out")
        yield
    finally:
        os.close(fd)
