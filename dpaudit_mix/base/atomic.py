"""Atomic file writes: a reader never sees a half-written output (temp file, then rename).

A temp file carries its writer's pid; one left by a writer that died (kill -9, power loss) is
removed by the next write of the same target, so nothing half-written lingers or is trusted.
"""

from __future__ import annotations

import glob
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError, require


def _fsync(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _remove_stale_temps(target: Path) -> None:
    """Temp files of ``target`` whose writer is dead (pid in the name): leftovers of a killed write."""
    for leftover in glob.glob(os.path.join(glob.escape(str(target.parent)), f".{glob.escape(target.name)}.*.tmp*")):
        parts = Path(leftover).name[len(target.name) + 2 :].split(".")
        if parts and parts[0].isdigit() and not _alive(int(parts[0])):
            Path(leftover).unlink(missing_ok=True)


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success.

    The file gets the mode any tool would create (0666 less the umask; mkstemp's is 0600), and
    it and then its folder are fsynced, so the rename survives a power loss, not only a kill.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp" + suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        _fsync(tmp)
        os.replace(tmp, target)
        _fsync(target.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Text as UTF-8 whatever the locale (a report must not depend on LANG)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | os.PathLike[str], content: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(content)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_npz(path: str | os.PathLike[str], **arrays: np.ndarray) -> None:
    """``np.savez`` appends ``.npz`` to names lacking it, so the temp name keeps that suffix."""
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, **arrays)  # type: ignore[arg-type]  # numpy's stub reads ** as allow_pickle


def check_output(
    path: str | os.PathLike[str], folder: bool, inputs: Sequence[str | os.PathLike[str] | None] = ()
) -> Path:
    """Check, writing nothing, that ``path`` can be created as an output folder (or file).

    Commands call this before any computation, so a bad ``--out`` costs one line, not a run. An
    output is never one of the command's ``inputs`` and never a device, FIFO or socket: those
    would be destroyed by the write, not replaced.
    """
    try:
        return _check_output(Path(path), folder, [Path(p) for p in inputs if p is not None])
    except OSError as exc:  # a symlink loop, a name over the OS limit, …
        raise InputError(f"cannot use {path} as output: {exc.strerror or exc}") from None


def _check_output(target: Path, folder: bool, inputs: list[Path]) -> Path:
    kind = "folder" if folder else "file"
    try:
        target.resolve()
    except RuntimeError:  # Python 3.11 reports a symlink loop this way
        raise InputError(f"cannot use {target} as output: a symbolic link loop") from None
    for given in inputs:
        require(
            not (given.exists() and target.exists() and os.path.samefile(given, target)),
            f"output {kind} {target} is the input {given}; it would be overwritten: choose another --out",
        )
    if target.is_symlink() or target.exists():
        require(target.exists(), f"output {kind} {target} is a dangling symbolic link")
        mode = target.stat().st_mode
        require(
            stat.S_ISDIR(mode) or stat.S_ISREG(mode),
            f"output {kind} {target} is a special file (device, FIFO or socket); refusing to replace it",
        )
        require(target.is_dir() == folder, f"output {kind} {target} exists and is a {'file' if folder else 'folder'}")
    ancestor = target if folder and target.is_dir() else target.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    require(ancestor.is_dir(), f"cannot create the output {kind} {target}: {ancestor} is a file, not a folder")
    require(
        os.access(ancestor, os.W_OK | os.X_OK), f"cannot create the output {kind} {target}: {ancestor} is not writable"
    )
    try:  # permission bits do not tell everything (root, read-only or virtual file systems): try it
        os.rmdir(tempfile.mkdtemp(prefix=".dpaudit-probe-", dir=ancestor))
    except OSError as exc:
        raise InputError(
            f"cannot create the output {kind} {target}: {ancestor} refuses new entries ({exc.strerror})"
        ) from None
    return target
