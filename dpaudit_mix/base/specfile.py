"""TOML spec files (audits/, recovery/, pipeline/, releases/): one loader, strict about keys and types.

A spec is a frozen dataclass whose ``__post_init__`` calls :func:`check_fields` and then checks
ranges. The field annotations are the schema: a value of the wrong type is refused with one
message naming the key, the value and the expected type, so ``runs = 2000.0`` or
``epsilon = true`` never reach the code with a meaning nobody wrote. Hand checks over the
annotations suffice for these flat specs, so no validation library is added as a dependency.
"""

from __future__ import annotations

import math
import numbers
import tomllib
import types
import typing
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Annotated, Any, TypeVar

import numpy as np

from .errors import InputError, require

SpecT = TypeVar("SpecT")

#: a seed field: an integer >= 0 (numpy's seed sequences refuse negative entropy).
Seed = Annotated[int, "seed >= 0"]


_PLURAL = {bool: "true/false values", int: "integers", float: "finite numbers", str: "strings"}


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) is Annotated:
        return f"{_describe(typing.get_args(hint)[0])} >= 0"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        return f"a list of {_PLURAL.get(typing.get_args(hint)[0], 'values')}"
    return {bool: "true/false", int: "an integer", float: "a finite number", str: "a string", type(None): "none"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def _coerce(value: Any, hint: Any) -> Any:
    """``value`` as ``hint`` (an int is a float, a list a tuple); TypeError if it is not one."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        value = _coerce(value, typing.get_args(hint)[0])
        if value < 0:
            raise TypeError
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            try:
                return _coerce(value, arg)
            except TypeError:
                continue
        raise TypeError
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            raise TypeError
        return tuple(_coerce(item, typing.get_args(hint)[0]) for item in value)
    if hint is type(None):
        if value is not None:
            raise TypeError
        return value
    if hint is bool:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError
        return bool(value)
    if hint is int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise TypeError
        return value if type(value) is int else int(value)
    if hint is float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise TypeError
        return value if type(value) is float else float(value)
    if hint is str:
        if not isinstance(value, str):
            raise TypeError
        return value
    return value  # arrays and other rich fields are checked by their owner


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def check_fields(spec: Any) -> None:
    """Check every field of the frozen dataclass ``spec`` against its annotation, coercing in place."""
    hints = _hints(type(spec))  # type: ignore[arg-type]  # a class is hashable; the stub says otherwise
    for f in fields(spec):
        value = getattr(spec, f.name)
        try:
            coerced = _coerce(value, hints[f.name])
        except TypeError:
            raise InputError(f"{f.name} = {value!r}: expected {_describe(hints[f.name])}") from None
        if coerced is not value:
            object.__setattr__(spec, f.name, coerced)


def read_spec_bytes(path: Path) -> bytes:
    """A spec file's bytes, read once (a release hashes exactly what it parses)."""
    require(path.is_file(), f"spec not found: {path}")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read spec {path}: {exc.strerror or exc}") from None


def _parse(path: Path, content: bytes) -> dict[str, Any]:
    try:
        return tomllib.loads(content.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot parse spec {path}: {exc}") from None
    except RecursionError:  # tomllib recurses once per nested table or array
        raise InputError(f"cannot parse spec {path}: it nests deeper than any spec does") from None


def _read(path: Path) -> dict[str, Any]:
    return _parse(path, read_spec_bytes(path))


def spec_table(path: Path, content: bytes) -> dict[str, Any]:
    """A spec file's keys, before choosing which spec class reads them (e.g. by its world)."""
    return _parse(path, content)


def load_spec_file(cls: type[SpecT], path: str | Path, **overrides: Any) -> SpecT:
    """Read ``path`` into the spec dataclass ``cls``; one clear InputError on any problem."""
    path = Path(path)
    return parse_spec(cls, path, read_spec_bytes(path), **overrides)


def parse_spec(cls: type[SpecT], path: Path, content: bytes, **overrides: Any) -> SpecT:
    """The spec dataclass ``cls`` from the bytes of ``path`` (already read once by the caller)."""
    raw = _parse(path, content)
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - known)
    require(not unknown, f"unknown key(s) in {path}: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    raw.update({k: v for k, v in overrides.items() if v is not None})
    for group in getattr(cls, "EXCLUSIVE", ()):  # keys that say one thing two ways: at most one of each group
        given = [k for k in group if k in raw]
        require(len(given) <= 1, f"{path}: give one of {' or '.join(group)}, not {' and '.join(given)}")
    try:
        return cls(**raw)
    except InputError as exc:
        raise InputError(f"bad spec {path}: {exc}") from None
