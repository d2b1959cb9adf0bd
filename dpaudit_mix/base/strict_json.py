"""JSON a user hands in (a release manifest, a ledger, a data manifest's lines), read strictly.

Python's parser keeps the *last* of two equal keys and accepts ``NaN`` and ``Infinity``: a
``release.json`` with ``"weights"`` twice (forged first, signed last) would show one reader other
λ than another reads, and a non-finite number is no JSON. Both are refused here, with every
malformed document, as one :class:`InputError` naming what was read.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import InputError


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError(f"the key(s) {twice} appear more than once in one object")
    return dict(pairs)


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(text: str | bytes, what: str) -> Any:
    """``text`` as JSON, refusing duplicate keys and NaN/Infinity (one InputError naming ``what``)."""
    try:
        return json.loads(text, object_pairs_hook=_object, parse_constant=_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InputError(f"{what} is not JSON: {exc}") from None
