"""Atomic file writes: a reader never sees a half-written output (temp file, then rename)."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .errors import InputError


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp" + suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
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


def writable_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` as a folder and check it takes files; one InputError otherwise."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise InputError(f"cannot write to the output folder {folder}: {exc.strerror or exc}") from None
    return folder
