"""The privacy-budget ledger: every release on one sensitive data set, composed in the PLD accountant.

Releasing twice on the same data spends budget twice, so the ledger keys releases by the data
they spend: the identity of the sensitive data set (:mod:`..base.identity`), one key for λ and
model releases alike; a problem that does not know where it came from falls back to the digest of
its rows. Each entry records what every phase spent on which part of the data (all of it, or one
side of a partition, such as the pipeline's split A and split B), so that phases on disjoint
parts compose in parallel (the worst part) and everything on one part sequentially (PLD), at the
data's δ: the remaining budget is the cap minus exactly what the releases compose to, never less
than any one release's own claim.

The ledger is a database (:mod:`.ledger_store`: SQLite by default, PostgreSQL for a team), whose
rows are an append-only, signed hash chain (:mod:`.ledger_chain`). :func:`reserve` checks the
budget and appends a *reservation* in one serialised transaction, before verification starts;
:func:`commit` appends the release's commit (with its manifest's digest), :func:`withdraw` a
withdrawal with its reason. A crash leaves the reservation standing: the budget is over-counted,
never under-counted, until :func:`recover` commits a release that was published, or
:func:`withdraw` withdraws one that published nothing. Two releases started together serialise
on the ledger's write lock and cannot spend one budget twice. Only the gate's protocol
(:mod:`.gate`) reserves, commits and withdraws for a release.

A JSON ledger of an earlier layout (v1–v5) is imported once (:func:`import_json`), its history
kept in the import row; the releases of an earlier layout that keyed data by a problem's bytes or
rows are carried to the data's identity by the next reservation that names those keys
(``aliases``), history kept.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import accounting
from ..base import strict_json
from ..base.cache import sha256_bytes
from ..base.errors import InputError, require
from ..base.identity import ALL, is_part
from . import signing
from .ledger_chain import Row, State, entry_body, fold, signed_row, trust_body
from .ledger_history import (
    Head,
    chain_broken,
    charged_on,
    head,
    remember,
    row_sha256,
    unimported_json,
    verify_chain,
    where_of,
)
from .ledger_records import IDENTITIES, Conflict, Dataset, Entry, parse
from .ledger_rules import OverBudget, check_fixed, check_unit, merged_dataset, within_cap
from .ledger_spend import spent
from .ledger_store import Location, Store, location

__all__ = [
    "BrokenChain",
    "Conflict",
    "Dataset",
    "Entry",
    "Head",
    "OverBudget",
    "charged_on",
    "commit",
    "entry",
    "head",
    "import_json",
    "location",
    "read",
    "read_state",
    "recover",
    "reserve",
    "row_sha256",
    "set_budget",
    "spent",
    "standing",
    "state",
    "trust_key",
    "unimported_json",
    "verify_chain",
    "withdraw",
]


class BrokenChain(InputError):
    """The ledger's chain was changed outside dpaudit-mix: nothing is written onto it."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def state(ledger: str | Path | Location | None = None) -> State:
    """The ledger's state: its rows folded (empty where it was never written)."""
    return fold(Store(where_of(ledger)).rows())


def read_state(ledger: str | Path | Location | None = None) -> tuple[dict[str, Dataset], list[Entry]]:
    """The ledger's data sets and its releases and open reservations."""
    found = state(ledger)
    return found.datasets, found.entries


def read(ledger: str | Path | Location | None = None) -> list[Entry]:
    """The ledger's releases and open reservations."""
    return state(ledger).entries


Change = tuple[str, str, dict[str, Any]]  # (dataset, kind, body) of a row to append


def _append(ledger: str | Path | Location | None, change: Callable[[State], list[Change]]) -> list[Row]:
    """Append the rows ``change`` makes of the ledger's state, in its one write transaction, signed
    by this machine's key: the first row of a new ledger trusts that key; a ledger that does not
    trust it refuses, naming how to be trusted."""
    where = where_of(ledger)
    key = signing.signing_key()
    mine = signing.fingerprint(key.public_key())
    store = Store(where)
    with store.writing() as connection:
        rows = store.rows(connection)
        broken = chain_broken(where, rows)
        if broken is not None:  # nothing is written onto a history that was changed by hand
            raise BrokenChain(
                f"the ledger {where.shown} breaks at {broken.line()}: nothing is written onto it "
                "(`dpaudit-mix ledger verify` says the same; restore the database)"
            )
        current = fold(rows)
        new: list[Change] = [] if rows else [("", "trust-key", trust_body(key.public_key(), _now()))]
        if rows:
            require(
                mine in current.trusted,
                f"the ledger {where.shown} does not trust this machine's signing key ({mine}): on a machine "
                "it trusts, run `dpaudit-mix ledger trust-key FILE`, FILE from this machine's "
                "`dpaudit-mix signing-key --out FILE`",
            )
        new += change(current)
        written: list[Row] = []
        prev, seq = (rows[-1].sha256, rows[-1].seq) if rows else ("0" * 64, 0)
        for dataset, kind, body in new:
            seq += 1
            row = signed_row(seq, dataset, kind, body, prev, key)
            store.append(connection, row)
            written.append(row)
            prev = row.sha256
    if written:
        remember(where, written[-1], rows[0] if rows else written[0])
    return written


def reserve(
    ledger: str | Path | Location | None,
    *,
    data_sha256: str,
    problem_sha256: str,
    epsilon: float,
    delta: float,
    phase: accounting.GaussianPhase,
    user_level: bool,
    timestamp: str,
    budget: float | None,
    aliases: tuple[str, ...] = (),
    before: tuple[accounting.GaussianPhase, ...] = (),
    parts: tuple[str, ...] = (),
    kind: str = "",
    identity: str = "",
    out: str = "",
    max_rows_per_user: int = 0,
) -> str:
    """Check the budget and append a reservation, in one serialised transaction; its id,
    :class:`OverBudget`, or :class:`Conflict`.

    The data set's cap and δ are the ledger's, fixed by its first release: ``budget`` (the
    spec's) must be that cap or None, ``delta`` that δ, and everything on the data is composed
    at that δ. ``before``: phases this release runs on the data before ``phase`` (a model
    release: its mixture's); ``parts``: the part of the data each of ``(*before, phase)`` runs on
    (default: all of it); ``epsilon``: the release's own claim; ``aliases``: the digests earlier
    layouts keyed this data by; ``out``: the folder it releases into (what a recovery reads);
    ``max_rows_per_user``: at user level, the largest user's rows (its unit, recorded; a release
    of the other unit on the data is refused, :func:`.ledger_rules.check_unit`)."""
    require(identity in IDENTITIES, f"identity must be one of {IDENTITIES}, got {identity!r}")
    parts = parts or (ALL,) * (len(before) + 1)
    require(len(parts) == len(before) + 1 and all(is_part(p) for p in parts), f"bad parts {parts!r}")
    reservation = uuid.uuid4().hex

    def change(now: State) -> list[Change]:
        merged = merged_dataset(now.datasets, now.entries, data_sha256, problem_sha256, aliases)
        fixed = merged or Dataset(budget, delta, timestamp, identity=identity)
        fixed = replace(fixed, identity=identity or fixed.identity)
        check_fixed(fixed, budget, delta, data_sha256)
        check_unit(now.entries, data_sha256, problem_sha256, aliases, user_level)
        charges = tuple(zip((*before, phase), parts, strict=True))
        total = within_cap(now.entries, fixed, data_sha256, problem_sha256, aliases, charges, epsilon=epsilon)
        entry = Entry(
            id=reservation,
            status="reserved",
            data_sha256=data_sha256,
            epsilon=epsilon,
            delta=delta,
            noise_multiplier=phase.noise_multiplier,
            sample_rate=phase.sample_rate,
            steps=phase.steps,
            user_level=user_level,
            timestamp=timestamp,
            problem_sha256=problem_sha256,
            before=tuple((p.noise_multiplier, p.sample_rate, p.steps) for p in before),
            parts=parts,
            kind=kind,
            spent_epsilon=total,
            budget_epsilon=fixed.budget_epsilon,
        )
        unit = {"level": "user", "max_rows_per_user": max_rows_per_user} if user_level else {"level": "example"}
        body = {"entry": entry_body(entry), "dataset": fixed.to_dict(), "out": out, "unit": unit}
        return [(data_sha256, "reserve", body)]

    _append(ledger, change)
    return reservation


def entry(ledger: str | Path | Location | None, reservation: str) -> Entry:
    """The ledger's entry (or open reservation) ``reservation``."""
    return state(ledger).entry(reservation)


def standing(
    ledger: str | Path | Location | None, data_sha256: str, problem_sha256: str, aliases: tuple[str, ...] = ()
) -> tuple[float, float | None, float]:
    """(ε spent, the cap, δ) on this data: what a release says ("spent X of Y on this data")."""
    now = state(ledger)
    fixed = now.datasets.get(data_sha256)
    require(fixed is not None, f"the privacy ledger {where_of(ledger).shown} has no data set {data_sha256[:16]}")
    assert fixed is not None
    total = spent(now.entries, data_sha256, problem_sha256=problem_sha256, delta=fixed.delta, aliases=aliases)
    return total, fixed.budget_epsilon, fixed.delta


def set_budget(ledger: str | Path | Location | None, data: str, budget: float | None, timestamp: str) -> Dataset:
    """Change a data set's cap, explicitly: a ``cap`` row (``data``: its digest or a prefix of at
    least 8 characters that names one data set)."""
    require(budget is None or (math.isfinite(budget) and budget > 0), f"a budget must be > 0, got {budget}")
    chosen: list[str] = []

    def change(now: State) -> list[Change]:
        matches = [key for key in now.datasets if key.startswith(data)] if len(data) >= 8 else []
        require(len(matches) == 1, f"{data!r} names {len(matches)} data sets in the ledger (give 8+ characters)")
        chosen.append(matches[0])
        return [(matches[0], "cap", {"to": budget, "at": timestamp})]

    _append(ledger, change)
    return state(ledger).datasets[chosen[0]]


def commit(
    ledger: str | Path | Location | None, reservation: str, manifest_sha256: str, spent_epsilon: float | None = None
) -> None:
    """The reservation becomes the release's entry, naming its manifest by digest, with the spend
    its manifest states where the reservation did not record one (an uncapped data set)."""

    def change(now: State) -> list[Change]:
        found = now.entry(reservation)
        require(found.status == "reserved", f"the ledger's reservation {reservation} is already committed")
        body = {"id": reservation, "manifest_sha256": manifest_sha256, "spent_epsilon": spent_epsilon, "at": _now()}
        return [(found.data_sha256, "commit", body)]

    _append(ledger, change)


def withdraw(ledger: str | Path | Location | None, reservation: str, why: str) -> None:
    """Withdraw a reservation whose release published nothing, with the reason (a signed row).
    Refused while the folder it released into holds a release.json: that release was published,
    and :func:`recover` commits it."""
    require(bool(why.strip()), "a withdrawal says why (--why TEXT)")

    def change(now: State) -> list[Change]:
        found = now.entry(reservation)
        require(found.status == "reserved", f"{reservation} was released: a published release is never withdrawn")
        out = now.outs.get(reservation, "")
        require(
            not (out and _published_id(Path(out)) == reservation),
            f"{out} holds this reservation's release.json: it was published; `dpaudit-mix ledger recover {out}` "
            "commits it",
        )
        return [(found.data_sha256, "withdraw", {"id": reservation, "why": why, "at": _now()})]

    _append(ledger, change)


def _published_id(folder: Path) -> str | None:
    """The release id of the release.json ``folder`` holds (None: none, or one that cannot be read:
    a folder another release was published into names another id)."""
    try:
        found = strict_json.loads((folder / "release.json").read_bytes(), str(folder / "release.json"))
    except (OSError, InputError):
        return None
    return found.get("release_id") if isinstance(found, dict) else None


def trust_key(ledger: str | Path | Location | None, public_key_file: Path) -> str:
    """Let the ledger accept rows signed by the key in ``public_key_file`` (another machine of the
    team's: its ``dpaudit-mix signing-key``); a trust-key row, signed by this machine's trusted
    key. Returns the key's fingerprint."""
    public = signing.read_public_key(public_key_file)
    _append(ledger, lambda now: [("", "trust-key", trust_body(public, _now()))])
    return signing.fingerprint(public)


def import_json(ledger: str | Path | Location | None, path: Path) -> int:
    """Import a JSON ledger of any earlier layout, once: its data sets and releases, history
    kept, in one import row that records the file's sha256. Returns the releases imported."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the JSON ledger {path}: {exc.strerror or exc}") from None
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read the JSON ledger {path}: {exc}") from None
    datasets, entries = parse(path, text)
    digest = sha256_bytes(content)

    def change(now: State) -> list[Change]:
        require(digest not in now.imported, f"{path} (sha256 {digest[:16]}…) was imported already")
        body = {
            "file_sha256": digest,
            "file": str(path),
            "at": _now(),
            "datasets": {key: d.to_dict() for key, d in datasets.items()},
            "releases": [entry_body(e) for e in entries],
        }
        return [("", "import", body)]

    _append(ledger, change)
    return len(entries)


def recover(ledger: str | Path | Location | None, folder: Path) -> str:
    """Commit a release that was published (its release.json written and signed) but whose
    commit was lost: its signature must hold under this machine's key and its reservation be
    open in the ledger. Returns the reservation."""
    from .manifest import manifest_digest

    path = folder / "release.json"
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    manifest = strict_json.loads(content, str(path))
    require(isinstance(manifest, dict), f"{path} is not a manifest")
    verdict = signing.verify(manifest, signing.local_public_key())
    require(not verdict.problem and verdict.trusted, f"{path}: {verdict.problem or 'not signed by this machine'}")
    digest = manifest_digest(manifest)
    require(manifest.get("manifest_sha256") == digest, f"{path}: its digest does not match its contents")
    reservation = manifest.get("release_id")
    require(isinstance(reservation, str), f"{path} names no release id")
    budget = manifest.get("budget") if isinstance(manifest.get("budget"), dict) else {}
    commit(ledger, str(reservation), digest, budget.get("spent_epsilon"))
    return str(reservation)
