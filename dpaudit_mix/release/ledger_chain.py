"""The ledger's rows as a hash chain: each row names the one before it by its sha256 and is signed
by the Ed25519 release key of the machine that wrote it, so a row edited, deleted or reordered, or
written by a key the ledger does not trust, breaks the chain where it happened.

A row is ``(seq, dataset, kind, body, prev_sha256, signer)``, hashed as canonical JSON, and its
signature is over that sha256. Rows are never changed: a reservation, its commit or withdrawal, a
change of cap, an import and a newly trusted key are each a new row. The ledger's state (every
data set's cap and δ, every release) is a fold over the rows (:func:`fold`); :func:`verify` walks
the chain, checks every link, signature and signer, and recomputes the spend each reservation
recorded.

What this does not stop: someone who holds the database *and* a trusted signing key can write
rows that verify (a new history, signed); what it shows is every change made without one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..base.errors import InputError, require
from . import signing
from .ledger_records import Dataset, Entry
from .ledger_spend import spent

#: what a row may record.
KINDS = ("trust-key", "reserve", "commit", "withdraw", "cap", "import")
#: the link before the first row.
GENESIS = "0" * 64
#: how far a recorded spend may sit from its recomputation (PLD's answer, recomputed in another process).
SPEND_TOLERANCE = 1e-9


def canonical(value: Any) -> str:
    """The one text of a JSON value that is hashed and signed (sorted keys, no spaces, no NaN)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class Row:
    """One row of the ledger, as stored."""

    seq: int
    dataset: str  # the data set's key, "" for a row of the ledger as a whole
    kind: str
    body: dict[str, Any]
    prev_sha256: str
    sha256: str
    signer: str  # the fingerprint of the key that signed it
    signature: str  # base64 Ed25519 over the sha256's hex

    def content_sha256(self) -> str:
        """The sha256 the row's content hashes to (what ``sha256`` must be)."""
        return content_sha256(self.seq, self.dataset, self.kind, self.body, self.prev_sha256, self.signer)


def content_sha256(seq: int, dataset: str, kind: str, body: dict[str, Any], prev_sha256: str, signer: str) -> str:
    content = {"seq": seq, "dataset": dataset, "kind": kind, "body": body, "prev_sha256": prev_sha256}
    return hashlib.sha256(canonical({**content, "signer": signer}).encode()).hexdigest()


def signed_row(
    seq: int, dataset: str, kind: str, body: dict[str, Any], prev_sha256: str, key: Ed25519PrivateKey
) -> Row:
    """A new row after ``prev_sha256``, hashed and signed by ``key``."""
    require(kind in KINDS, f"unknown ledger row kind {kind!r}")
    signer = signing.fingerprint(key.public_key())
    digest = content_sha256(seq, dataset, kind, body, prev_sha256, signer)
    signature = base64.b64encode(key.sign(digest.encode())).decode()
    return Row(seq, dataset, kind, body, prev_sha256, digest, signer, signature)


def trust_body(public: Ed25519PublicKey, timestamp: str) -> dict[str, Any]:
    """A trust-key row's body: the key (base64 raw) and its fingerprint."""
    raw = signing.raw_public(public)
    return {"public_key": base64.b64encode(raw).decode(), "fingerprint": signing.fingerprint(public), "at": timestamp}


@dataclass
class State:
    """The ledger folded: its data sets, its releases and reservations (withdrawn ones gone),
    the keys it trusts, and its head (the last row)."""

    datasets: dict[str, Dataset] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)
    trusted: dict[str, Ed25519PublicKey] = field(default_factory=dict)
    outs: dict[str, str] = field(default_factory=dict)  # reservation → the folder it releases into
    imported: set[str] = field(default_factory=set)  # the sha256 of every JSON ledger imported
    head: Row | None = None

    def entry(self, reservation: str) -> Entry:
        found = [e for e in self.entries if e.id == reservation]
        require(len(found) == 1, f"the ledger holds no open reservation or release {reservation!r}")
        return found[0]


def _apply(state: State, row: Row) -> None:
    """One row's change to the state (the writer checked it; :func:`verify` checks the chain)."""
    body = row.body
    if row.kind == "trust-key":
        key = Ed25519PublicKey.from_public_bytes(base64.b64decode(body["public_key"], validate=True))
        state.trusted[signing.fingerprint(key)] = key
    elif row.kind == "reserve":
        entry = Entry(**body["entry"])
        aliases = tuple(body["dataset"]["aliases"])
        if aliases or any(not e.data_sha256 for e in state.entries):  # an earlier layout's keys, carried over
            state.entries = [
                replace(e, data_sha256=row.dataset)
                if e.data_sha256 != row.dataset and e.on(row.dataset, entry.problem_sha256, aliases)
                else e
                for e in state.entries
            ]
        for old in aliases:
            state.datasets.pop(old, None)
        state.datasets[row.dataset] = dataset_of(body["dataset"])
        state.entries.append(entry)
        state.outs[entry.id] = body.get("out", "")
    elif row.kind == "commit":
        i = next(i for i, e in enumerate(state.entries) if e.id == body["id"])
        recorded = state.entries[i].spent_epsilon
        spent_now = recorded if recorded is not None else body["spent_epsilon"]
        state.entries[i] = replace(
            state.entries[i], status="released", manifest_sha256=body["manifest_sha256"], spent_epsilon=spent_now
        )
    elif row.kind == "withdraw":
        gone = state.entries.pop(next(i for i, e in enumerate(state.entries) if e.id == body["id"]))
        if not any(e.data_sha256 == gone.data_sha256 for e in state.entries):  # nothing spent: nothing fixed
            state.datasets.pop(gone.data_sha256, None)
    elif row.kind == "cap":
        old = state.datasets[row.dataset]
        change = {"from": old.budget_epsilon, "to": body["to"], "timestamp": body["at"]}
        state.datasets[row.dataset] = replace(old, budget_epsilon=body["to"], changes=(*old.changes, change))
    elif row.kind == "import":
        state.imported.add(body["file_sha256"])
        for key, raw in body["datasets"].items():
            state.datasets[key] = dataset_of(raw)
        state.entries += [Entry(**raw) for raw in body["releases"]]
    state.head = row


def dataset_of(raw: dict[str, Any]) -> Dataset:
    """A data set as a row's body holds it (lists back to tuples)."""
    return Dataset(**{**raw, "changes": tuple(raw["changes"]), "aliases": tuple(raw["aliases"])})


def entry_body(entry: Entry) -> dict[str, Any]:
    """An entry as a row's body holds it (tuples as lists: JSON)."""
    from dataclasses import asdict

    raw = asdict(entry)
    return {**raw, "before": [list(p) for p in entry.before], "parts": list(entry.parts)}


def restored(raw: dict[str, Any]) -> dict[str, Any]:
    """A row body's entry fields back as :class:`Entry` takes them."""
    return {**raw, "before": tuple(tuple(p) for p in raw["before"]), "parts": tuple(raw["parts"])}


def fold(rows: list[Row]) -> State:
    """The state the rows add up to (rows as stored; :func:`verify` is what checks them)."""
    state = State()
    for row in rows:
        try:
            _apply(state, _normalised(row))
        except (KeyError, TypeError, ValueError, StopIteration) as exc:
            raise InputError(
                f"the ledger's row {row.seq} ({row.kind}) cannot be read ({type(exc).__name__}: {exc}); "
                "run `dpaudit-mix ledger verify`"
            ) from None
    return state


def _normalised(row: Row) -> Row:
    """A row whose entry lists are tuples again (JSON has no tuples)."""
    if row.kind == "reserve":
        return replace(row, body={**row.body, "entry": restored(row.body["entry"])})
    if row.kind == "import":
        return replace(row, body={**row.body, "releases": [restored(r) for r in row.body["releases"]]})
    return row


@dataclass(frozen=True)
class Broken:
    """The first row that breaks the chain, and how."""

    seq: int
    why: str

    def line(self) -> str:
        return f"row {self.seq}: {self.why}"


def verify(rows: list[Row], *, spends: bool = True, signed_from: int = 1) -> Broken | None:
    """Walk the chain: every row numbered in turn, linked to the one before by its sha256, hashing
    to its sha256, signed by a key the ledger trusted when it was written (the first row trusts
    its own writer's key), and (``spends``) every reservation's recorded spend what the rows
    before it compose to, a composition per reservation: the links and signatures alone cost
    microseconds a row. Signatures are checked from row ``signed_from`` on (the rows before it
    were checked when this machine saw them, and their hashes, checked here, pin them). None when
    intact, else the first row that breaks."""
    state, prev = State(), GENESIS
    for expected, row in enumerate(rows, start=1):
        if row.seq != expected:
            return Broken(row.seq, f"numbered {row.seq} where row {expected} was due: a row was deleted or moved")
        if row.prev_sha256 != prev:
            return Broken(row.seq, "does not follow the row before it (a row was deleted, moved or changed)")
        if row.content_sha256() != row.sha256:
            return Broken(row.seq, "its content is not what its sha256 says (edited after it was written)")
        if expected == 1:
            if row.kind != "trust-key":
                return Broken(row.seq, "the first row must trust its writer's key")
            _apply(state, _normalised(row))
        key = state.trusted.get(row.signer)
        if key is None:
            return Broken(row.seq, f"signed by {row.signer[:23]}…, a key the ledger does not trust")
        if row.seq >= signed_from:
            try:
                key.verify(base64.b64decode(row.signature, validate=True), row.sha256.encode())
            except (InvalidSignature, ValueError):
                return Broken(row.seq, f"its signature does not verify under {row.signer[:23]}…")
        recorded = _recorded_spend(state, row) if spends else None
        try:
            if expected > 1:
                _apply(state, _normalised(row))
        except (KeyError, TypeError, ValueError, StopIteration) as exc:
            return Broken(row.seq, f"does not follow from the rows before it ({type(exc).__name__}: {exc})")
        if (
            recorded is not None
            and recorded[0] is not None
            and abs(recorded[0] - recorded[1]) > SPEND_TOLERANCE * max(1.0, recorded[1])
        ):
            return Broken(row.seq, f"records {recorded[0]:.6g} spent, but the rows compose to {recorded[1]:.6g}")
        prev = row.sha256
    return None


def _recorded_spend(state: State, row: Row) -> tuple[float | None, float] | None:
    """A reservation's recorded spend beside what the rows before it, and it, compose to."""
    if row.kind != "reserve":
        return None
    entry = Entry(**restored(row.body["entry"]))
    if entry.spent_epsilon is None:
        return None
    aliases = tuple(row.body["dataset"]["aliases"])
    total = spent(
        [*state.entries, entry],
        row.dataset,
        problem_sha256=entry.problem_sha256,
        delta=dataset_of(row.body["dataset"]).delta,
        aliases=aliases,
    )
    return entry.spent_epsilon, total if math.isfinite(total) else math.inf
