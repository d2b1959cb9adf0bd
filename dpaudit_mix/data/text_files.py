"""Text sets from a user's files: ``.txt`` (one document a line; blank lines skipped) or
``.jsonl`` (one JSON object a line with ``text``, and for the sensitive set ``user``: an integer
or a string id, on every line or on none).

Both are read once as UTF-8 (strictly: a byte that is not UTF-8 is refused, with its offset),
and their sha256 is taken of the bytes parsed. Integer user ids are kept as they are; string ids
become 0, 1, … in order of first appearance.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..base import npz, strict_json
from ..base.errors import InputError, require


@dataclass(frozen=True)
class TextSet:
    texts: tuple[str, ...]
    users: np.ndarray | None  # (N,) int64, or None
    digest: str


def _decoded(content: bytes, where: str) -> str:
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def _jsonl(text: str, where: str, users_allowed: bool) -> tuple[list[str], np.ndarray | None]:
    texts: list[str] = []
    ids: list[object] = []
    with_user = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = strict_json.loads(line, f"{where}: line {number}")
        require(isinstance(record, dict), f"{where}: line {number} is not a JSON object")
        unknown = sorted(set(record) - {"text", "user"})
        require(not unknown, f"{where}: line {number} has unknown keys {', '.join(unknown)} (text, user)")
        value = record.get("text")
        require(
            isinstance(value, str) and value.strip() != "", f"{where}: line {number} has no text (a non-empty string)"
        )
        texts.append(value)
        if "user" in record:
            require(users_allowed, f"{where}: line {number}: only the sensitive set may give users")
            user = record["user"]
            require(
                (isinstance(user, int) and not isinstance(user, bool) and user >= 0)
                or (isinstance(user, str) and user != ""),
                f"{where}: line {number}: user must be an integer >= 0 or a non-empty string, got {user!r}",
            )
            with_user += 1
            ids.append(user)
    require(
        with_user in (0, len(texts)),
        f"{where}: {with_user} of {len(texts)} documents give a user: give every document a user, or none",
    )
    if not with_user:
        return texts, None
    if all(isinstance(u, int) for u in ids):
        return texts, np.array(ids, dtype=np.int64)
    require(all(isinstance(u, str) for u in ids), f"{where}: user ids mix integers and strings")
    order: dict[object, int] = {}
    return texts, np.array([order.setdefault(u, len(order)) for u in ids], dtype=np.int64)


def read_texts(path: Path, *, users_allowed: bool = False) -> TextSet:
    """The documents at ``path`` (``.txt`` or ``.jsonl``), and their users where given."""
    where = str(path)
    content = npz.read_file(path, "text file")
    text = _decoded(content, where)
    if path.suffix == ".jsonl":
        texts, users = _jsonl(text, where, users_allowed)
    else:
        texts, users = [line for line in text.splitlines() if line.strip()], None
    require(bool(texts), f"{where}: no documents (the file is empty or blank)")
    return TextSet(tuple(texts), users, hashlib.sha256(content).hexdigest())
