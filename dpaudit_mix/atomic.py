"""Atomic file writes: a reader never sees a half-written output (temp file, then rename)."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

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


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success.

    The file gets the mode any tool would create (0666 less the umask; mkstemp's is 0600), and
    it and then its folder are fsynced, so the rename survives a power loss, not only a kill.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp" + suffix)
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
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_npz(path: str | os.PathLike[str], **arrays: np.ndarray) -> None:
    """``np.savez`` appends ``.npz`` to names lacking it, so the temp name keeps that suffix."""
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, **arrays)


def check_output(path: str | os.PathLike[str], folder: bool) -> Path:
    """Check, writing nothing, that ``path`` can be created as an output folder (or file).

    Commands call this before any computation, so a bad ``--out`` costs one line, not a run.
    """
    target = Path(path)
    kind = "folder" if folder else "file"
    if target.exists():
        require(target.is_dir() == folder, f"output {kind} {target} exists and is a {'file' if folder else 'folder'}")
    ancestor = target if folder and target.is_dir() else target.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    require(ancestor.is_dir(), f"cannot create the output {kind} {target}: {ancestor} is a file, not a folder")
    require(os.access(ancestor, os.W_OK | os.X_OK), f"cannot create the output {kind} {target}: {ancestor} is not writable")
    try:  # permission bits do not tell everything (root, read-only or virtual file systems): try it
        os.rmdir(tempfile.mkdtemp(prefix=".dpaudit-probe-", dir=ancestor))
    except OSError as exc:
        raise InputError(f"cannot create the output {kind} {target}: {ancestor} refuses new entries ({exc.strerror})"
                         ) from None
    return target
