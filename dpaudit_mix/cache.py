"""Checked on-disk caches: an output is reused only if its SHA-256 sidecar matches and it loads.

The pipeline's stage cache and the built embedded problems share this rule: anything that fails
the check is recomputed, with one warning line, never trusted and never a traceback.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .atomic import write_text
from .errors import InputError, require

T = TypeVar("T")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def user_cache_dir() -> Path:
    """``$DPAUDIT_MIX_CACHE``, else ``$XDG_CACHE_HOME/dpaudit-mix``, else ``~/.cache/dpaudit-mix``."""
    if os.environ.get("DPAUDIT_MIX_CACHE"):
        return Path(os.environ["DPAUDIT_MIX_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dpaudit-mix"


def cached(path: Path, compute: Callable[[], T], save: Callable[[Path, T], None], load: Callable[[Path], T]) -> T:
    """``load(path)`` if it passes its checksum; else ``compute()``, saved with a fresh checksum."""
    check = path.with_name(path.name + ".sha256")
    if path.is_file():
        try:
            require(check.is_file() and check.read_text().strip() == sha256(path), "checksum mismatch")
            return load(path)
        except (InputError, OSError, ValueError, KeyError, EOFError) as exc:
            print(f"dpaudit-mix: warning: cached {path} failed its check ({exc}); recomputing", file=sys.stderr)
    value = compute()
    try:
        save(path, value)
        write_text(check, sha256(path) + "\n")
    except OSError as exc:  # a cache that cannot be written costs time, not the result
        print(f"dpaudit-mix: warning: cannot write the cache {path}: {exc.strerror or exc}", file=sys.stderr)
    return value
