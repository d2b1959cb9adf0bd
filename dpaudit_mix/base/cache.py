"""Checked on-disk caches: an output is reused only if its SHA-256 sidecar matches and it loads.

The pipeline's stage cache and the built embedded problems share this rule: anything that fails
the check is recomputed, with one warning line, never trusted and never a traceback. The sidecar
hashes the entry's key (its folder and file name) before its bytes, so an entry moved or copied
under another key, sidecar and all, fails its check too (:func:`entry_digest`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from . import npz
from .atomic import write_npz, write_text
from .errors import InputError, require

T = TypeVar("T")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256(path: Path, prefix: bytes = b"") -> str:
    """sha256 of ``prefix`` then the file's bytes, read in blocks."""
    digest = hashlib.sha256(prefix)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def json_sha256(obj: Any, compact: bool = False) -> hashlib._Hash:
    """sha256 of ``obj`` as key-sorted JSON (``compact``: without spaces), ready for more bytes:
    the one canonical form every key, digest and resume check here hashes."""
    separators = (",", ":") if compact else (", ", ": ")
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=separators, default=str).encode())


def versions(names: tuple[str, ...]) -> dict[str, str]:
    """Each installed distribution's version ("absent" if not installed): what a cache key
    names so that an upgrade starts afresh."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


def content_key(**parts: object) -> str:
    """A short hash of a stage's parameters and its inputs' keys: the name of its cached output."""
    return json_sha256(parts).hexdigest()[:20]


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """A cached ``.npz``, its headers checked before it is inflated (an entry is a file on disk
    that anyone with write access may have replaced)."""
    return npz.load(path, "cache entry")


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    write_npz(path, **arrays)


def user_cache_dir() -> Path:
    """``$DPAUDIT_MIX_CACHE``, else ``$XDG_CACHE_HOME/dpaudit-mix``, else ``~/.cache/dpaudit-mix``."""
    if os.environ.get("DPAUDIT_MIX_CACHE"):
        return Path(os.environ["DPAUDIT_MIX_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dpaudit-mix"


def user_state_dir() -> Path:
    """``$XDG_STATE_HOME/dpaudit-mix``, else ``~/.local/state/dpaudit-mix``: what must outlive a
    cache (the privacy ledger); unlike the cache, nothing here may be deleted to save space."""
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "dpaudit-mix"


def entry_digest(path: Path) -> str:
    """sha256 of ``<folder>/<name>``, a NUL, then the entry's bytes: the key is inside the checked
    content, so seed 1's entry put under seed 0's name (or one stage's output copied over another's)
    does not match the sidecar it brought along."""
    return sha256(path, f"{path.parent.name}/{path.name}".encode() + b"\0")


def verified(path: Path) -> bool:
    """Whether ``path`` exists and matches its keyed SHA-256 sidecar (``path.sha256``)."""
    check = path.with_name(path.name + ".sha256")
    return path.is_file() and check.is_file() and check.read_text(encoding="utf-8").strip() == entry_digest(path)


def cached(
    path: Path, compute: Callable[[], T], save: Callable[[Path, T], None], load: Callable[[Path], T], write: bool = True
) -> T:
    """``load(path)`` if it passes its checksum; else ``compute()``, saved with a fresh checksum
    (unless ``write`` is False: a cache known to be unwritable is only read)."""
    check = path.with_name(path.name + ".sha256")
    if path.is_file():
        try:
            require(verified(path), "checksum mismatch, or the entry belongs to another key")
            return load(path)
        except (InputError, OSError, ValueError, KeyError, EOFError) as exc:
            print(f"dpaudit-mix: warning: cached {path} failed its check ({exc}); recomputing", file=sys.stderr)
    value = compute()
    if not write:
        return value
    try:
        save(path, value)
        write_text(check, entry_digest(path) + "\n")
    except OSError as exc:  # a cache that cannot be written costs time, not the result
        print(f"dpaudit-mix: warning: cannot write the cache {path}: {exc.strerror or exc}", file=sys.stderr)
    return value
