"""What the ledger's chain says of its history: its head, the row a release was charged on, the
chain walked (:func:`verify_chain`), and whether a JSON ledger beside it was imported. A machine
remembers the last row it wrote or verified of each ledger (in its state folder), since a chain
cut short verifies on its own."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import strict_json
from ..base.atomic import write_json
from ..base.cache import sha256_bytes, user_state_dir
from ..base.errors import InputError
from .ledger_chain import Broken, Row, fold, verify
from .ledger_store import Location, Store, location


@dataclass(frozen=True)
class Head:
    """A row of the chain, as a manifest records it: its number and its sha256."""

    row: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"row": self.row, "sha256": self.sha256}


def where_of(ledger: str | Path | Location | None) -> Location:
    return ledger if isinstance(ledger, Location) else location(ledger)


def head(ledger: str | Path | Location | None = None) -> Head | None:
    """The chain's last row (None: an empty ledger)."""
    rows = Store(where_of(ledger)).rows()
    return Head(rows[-1].seq, rows[-1].sha256) if rows else None


def charged_on(ledger: str | Path | Location | None, reservation: str) -> Head:
    """The row that reserved ``reservation``: the history a release was charged on, which its
    manifest records and check-release finds again in the chain."""
    for row in Store(where_of(ledger)).rows():
        if row.kind == "reserve" and row.body.get("entry", {}).get("id") == reservation:
            return Head(row.seq, row.sha256)
    raise InputError(f"the ledger {where_of(ledger).shown} holds no reservation {reservation!r}")


def row_sha256(ledger: str | Path | Location | None, seq: int) -> str | None:
    """The sha256 of row ``seq`` (None: no such row)."""
    rows = Store(where_of(ledger)).rows()
    return rows[seq - 1].sha256 if 1 <= seq <= len(rows) and rows[seq - 1].seq == seq else None


def verify_chain(ledger: str | Path | Location | None = None, *, spends: bool = True) -> tuple[int, Broken | None]:
    """The rows walked (:func:`.ledger_chain.verify`): how many, and the first that breaks (None:
    intact). A chain cut short verifies on its own, so the last row this machine wrote or saw
    intact (kept in its state folder, by the ledger's first row and by its name) must still be
    there: a deleted newest row breaks too."""
    where = where_of(ledger)
    rows = Store(where).rows()
    broken = verify(rows, spends=spends) or _behind(where, rows)
    if broken is None and rows:
        remember(where, rows[-1], rows[0])
    return len(rows), broken


def chain_broken(where: Location, rows: list[Row]) -> Broken | None:
    """Where the chain breaks by its links, its signatures since the last row this machine saw
    (those before were checked then) and this machine's memory; not its recorded spends (a write
    checks this much, ``ledger verify`` all)."""
    behind = _behind(where, rows)
    if behind is not None:
        return behind
    seen = _seen_heads().get(f"genesis:{rows[0].sha256}") if rows else None
    since = seen["row"] + 1 if isinstance(seen, dict) and isinstance(seen.get("row"), int) else 1
    return verify(rows, spends=False, signed_from=since)


def _behind(where: Location, rows: list[Row]) -> Broken | None:
    """A row this machine wrote or saw, by this ledger's first row or by its name, that the ledger
    no longer holds."""
    heads = _seen_heads()
    for key in ((f"genesis:{rows[0].sha256}",) if rows else ()) + (f"at:{where.shown}",):
        seen = heads.get(key)
        if isinstance(seen, dict) and isinstance(seen.get("row"), int) and seen["row"] >= 1:
            row = seen["row"]
            if len(rows) < row or rows[row - 1].sha256 != seen.get("sha256"):
                return Broken(row, "this machine wrote or saw it; the ledger no longer holds it (deleted or rewritten)")
    return None


def _heads_path() -> Path:
    return user_state_dir() / "ledger-heads.json"


def _seen_heads() -> dict[str, Any]:
    """The last row this machine wrote or verified, per ledger (a file in its state folder)."""
    try:
        found = strict_json.loads(_heads_path().read_bytes(), str(_heads_path()))
    except (OSError, InputError):
        return {}
    return found if isinstance(found, dict) else {}


def remember(where: Location, row: Row, first: Row) -> None:
    """Keep ``row`` as the last one this machine saw of this ledger, by its first row (whatever
    name it is reached by) and by its name (best effort: an unwritable state folder only loses the
    check of a deleted newest row)."""
    seen = {"row": row.seq, "sha256": row.sha256}
    heads = {**_seen_heads(), f"genesis:{first.sha256}": seen, f"at:{where.shown}": seen}
    with contextlib.suppress(OSError):
        write_json(_heads_path(), heads)


def forget(where: Location) -> None:
    """Forget what this machine saw of the ledger at ``where``'s name: for a ledger deleted on
    purpose (a demonstration's, made afresh on every run), never for one that holds a budget."""
    heads = {key: seen for key, seen in _seen_heads().items() if key != f"at:{where.shown}"}
    with contextlib.suppress(OSError):
        write_json(_heads_path(), heads)


def unimported_json(ledger: str | Path | Location | None = None) -> Path | None:
    """A JSON ledger beside this SQLite ledger that it has not imported (the gate refuses then):
    the machine's earlier ledger, whose budget would otherwise start afresh."""
    where = where_of(ledger)
    if where.path is None:
        return None
    beside = where.path.with_name("ledger.json")
    if not beside.is_file():
        return None
    try:
        digest = sha256_bytes(beside.read_bytes())
    except OSError:
        return beside
    return None if digest in fold(Store(where).rows()).imported else beside
