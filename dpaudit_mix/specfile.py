"""TOML spec files (audits/, recovery/, pipeline/): one loader, strict about unknown keys.

A spec is a frozen dataclass whose ``__post_init__`` validates it; TOML arrays become tuples so
specs stay hashable, and CLI overrides (None = not given) take precedence over the file.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from .errors import InputError, require

SpecT = TypeVar("SpecT")


def load_spec_file(cls: type[SpecT], path: str | Path, **overrides: Any) -> SpecT:
    """Read ``path`` into the spec dataclass ``cls``; one clear InputError on any problem."""
    path = Path(path)
    require(path.is_file(), f"spec not found: {path}")
    try:
        raw = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot parse spec {path}: {exc}") from None
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - known)
    require(not unknown, f"unknown key(s) in {path}: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    raw = {key: tuple(value) if isinstance(value, list) else value for key, value in raw.items()}
    raw.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return cls(**raw)
    except TypeError as exc:
        raise InputError(f"bad spec {path}: {exc}") from None
