"""The privacy-budget ledger: every release on one sensitive data set, composed in the PLD accountant.

Releasing twice on the same data spends budget twice, so the ledger keys releases by the data
they spend: the identity of the sensitive data set (:mod:`..identity`), one key for λ and model
releases alike; a problem that does not know where it came from falls back to the digest of its
rows. Each entry records what every phase spent on which part of the data (all of it, or one
side of a partition, such as the pipeline's split A and split B), so that phases on disjoint
parts compose in parallel (the worst part) and everything on one part sequentially (PLD), at the
data's δ: the remaining budget is the cap minus exactly what the releases compose to, never
less than any one release's own claim.

The ledger is a critical section (docs/concepts/release.md). :func:`reserve` checks the budget and appends a
*reservation* under an exclusive lock, before verification starts; :func:`commit` turns it into
the release's entry (with its manifest's digest), :func:`withdraw` removes it after a refusal. A
crash leaves the reservation standing: the budget is over-counted, never under-counted, and two
releases started together serialise on the lock and cannot spend one budget twice.

A ledger that cannot be read (truncated, not JSON, an entry failing its checks) refuses with the
entry it stopped at; it never reads as empty. Its lock file records the sha256 of the ledger as
last written here, so a ledger deleted, emptied or edited behind the package's back refuses too
(an operator who means it deletes the lock file). Symlinks are resolved, so a shared ledger is
written through, never replaced. A ledger of an earlier layout (v1–v4: entries keyed by a
problem's bytes or rows, a model's by its cut images) is read as it is and migrated by the next
release whose data it recognises: that release's older digests (``aliases``) name the entries
and caps to carry over to the data's identity, history kept.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

from .. import accounting
from ..base.atomic import write_bytes
from ..base.cache import sha256_bytes, user_state_dir
from ..base.errors import InputError, require
from ..base.identity import ALL, is_part
from .ledger_records import FORMAT, IDENTITIES, MAX_PARTITIONS, STATUSES, Conflict, Dataset, Entry, parse
from .ledger_spend import Charge, composed, spent

__all__ = [
    "FORMAT",
    "IDENTITIES",
    "MAX_PARTITIONS",
    "STATUSES",
    "Charge",
    "Conflict",
    "Dataset",
    "Entry",
    "OverBudget",
    "commit",
    "composed",
    "default_path",
    "entry",
    "read",
    "read_state",
    "reserve",
    "set_budget",
    "spent",
    "standing",
    "withdraw",
]


def default_path() -> Path:
    """``$DPAUDIT_MIX_LEDGER``, else ``ledger.json`` in the user state folder: one ledger for every
    release on this machine, wherever its ``--out`` is."""
    if os.environ.get("DPAUDIT_MIX_LEDGER"):
        return Path(os.environ["DPAUDIT_MIX_LEDGER"])
    return user_state_dir() / "ledger.json"


def _real(path: Path) -> Path:
    """The file a (possibly symlinked) ledger path names, so writes go through the link."""
    return Path(os.path.realpath(path))


def _recorded(lock: Path) -> str:
    """The sha256 of the ledger as last written here ("" where it never was)."""
    try:
        return lock.read_text(encoding="utf-8").strip() if lock.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return "unreadable"


def read(path: Path) -> list[Entry]:
    """The ledger's entries, checked ([] only where no ledger has ever been written)."""
    return read_state(path)[1]


def _check_path(path: Path, real: Path) -> None:
    """The ledger and its lock are regular files (or absent) in a folder: never a FIFO that blocks
    the open, a device that reads without end (/dev/full), or a folder."""
    for target in (real, _lock_path(real)):
        if target.exists():
            require(
                stat.S_ISREG(target.stat().st_mode),
                f"the privacy ledger {path}: {target} is not a regular file (a device, FIFO or folder); refusing it",
            )
    parent = next(p for p in (real.parent, *real.parent.parents) if p.exists())
    require(parent.is_dir(), f"the privacy ledger {path}: {parent} is not a folder")


def read_state(path: Path) -> tuple[dict[str, Dataset], list[Entry]]:
    """The ledger's data sets and entries, checked (empty only where no ledger was ever written)."""
    real = _real(path)
    _check_path(path, real)
    lock = _lock_path(real)
    recorded = _recorded(lock)
    if not real.exists():
        require(
            not recorded,
            f"the privacy ledger {path} is missing but its lock file {lock} shows it was written; "
            "restore it (a deleted ledger is not 'nothing spent')",
        )
        return {}, []
    try:
        content = real.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the privacy ledger {path}: {exc.strerror or exc}") from None
    require(
        not recorded or recorded == sha256_bytes(content),
        f"the privacy ledger {path} was changed outside dpaudit-mix (its sha256 is not the one recorded in "
        f"{lock}); restore it, or delete the lock file to accept it as it is",
    )
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read the privacy ledger {path}: {exc}") from None
    return parse(path, text)


def _lock_path(real: Path) -> Path:
    return real.with_name(real.name + ".lock")


@contextmanager
def _locked(path: Path) -> Iterator[Path]:
    """The real ledger path, held under an exclusive lock beside it (the lock file is never removed)."""
    real = _real(path)
    _check_path(path, real)
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(_lock_path(real), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        raise InputError(f"cannot use the privacy ledger {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield real
    finally:
        os.close(fd)  # releases the lock (so does the death of the process)


def _write(real: Path, entries: list[Entry], datasets: dict[str, Dataset]) -> None:
    """The ledger, then its digest in the lock file (a crash between the two refuses: fails closed)."""
    body = {
        "format": FORMAT,
        "datasets": {key: d.to_dict() for key, d in datasets.items()},
        "releases": [asdict(e) for e in entries],
    }
    content = (json.dumps(body, indent=2) + "\n").encode()
    write_bytes(real, content)
    _lock_path(real).write_text(sha256_bytes(content) + "\n", encoding="utf-8")


class OverBudget(Exception):
    """The reservation would take the data past its budget: nothing was written."""

    def __init__(self, before: float, after: float, budget: float = math.inf) -> None:
        super().__init__(f"{before:.4g} -> {after:.4g} of {budget:g}")
        self.before, self.after, self.budget = before, after, budget


def _merged(
    datasets: dict[str, Dataset],
    entries: list[Entry],
    key: str,
    problem_sha256: str,
    aliases: tuple[str, ...],
) -> tuple[Dataset | None, dict[str, Dataset], list[Entry]]:
    """The data set ``key`` with what an earlier layout recorded for the same data under
    ``aliases`` (or, v1, the problem file's bytes) carried over: those entries re-keyed, their
    caps merged (the smallest holds; δ must agree), the old keys kept in ``aliases``."""
    found = [k for k in (key, *aliases) if k in datasets]
    carried = [
        replace(e, data_sha256=key) if e.on(key, problem_sha256, aliases) and e.data_sha256 != key else e
        for e in entries
    ]
    if not found:
        return None, datasets, carried
    olds = [datasets[k] for k in found]
    deltas = {d.delta for d in olds}
    if len(deltas) > 1:
        raise Conflict(
            f"this data was recorded at several deltas {sorted(deltas)} under the ledger's older keys "
            f"{', '.join(k[:16] for k in found)}; compose them by hand and keep one (`dpaudit-mix ledger show`)"
        )
    caps = [d.budget_epsilon for d in olds if d.budget_epsilon is not None]
    since = min(d.since for d in olds)
    merged = Dataset(
        min(caps) if caps else None,
        olds[0].delta,
        since,
        tuple(c for d in olds for c in d.changes),
        datasets[key].identity if key in datasets else "",
        tuple(dict.fromkeys((*(a for d in olds for a in d.aliases), *(k for k in found if k != key)))),
    )
    rest = {k: d for k, d in datasets.items() if k not in found}
    return merged, rest, carried


def _check_fixed(fixed: Dataset, budget: float | None, delta: float, data_sha256: str) -> None:
    """A :class:`Conflict` unless a release's cap (None: left out) and δ are the data set's own."""
    if budget is not None and budget != fixed.budget_epsilon:
        cap = "no cap" if fixed.budget_epsilon is None else f"budget_epsilon {fixed.budget_epsilon:g}"
        raise Conflict(
            f"this data's cap is {cap}, fixed in the ledger on {fixed.since}; a spec cannot change it "
            f"(budget_epsilon {budget:g} asked): use `dpaudit-mix ledger set-budget {data_sha256[:16]}` "
            "(logged), or leave budget_epsilon out"
        )
    if delta != fixed.delta:
        raise Conflict(
            f"this data is accounted at delta {fixed.delta:g} (fixed by its first release on {fixed.since}); a "
            f"release at delta {delta:g} cannot be composed with it: release at delta {fixed.delta:g}"
        )


def reserve(
    path: Path,
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
) -> str:
    """Check the budget and append a reservation, atomically; its id, :class:`OverBudget`, or
    :class:`Conflict`.

    The data set's cap and δ are the ledger's, fixed by its first release: ``budget`` (the
    spec's) must be that cap or None, ``delta`` that δ, and everything on the data is composed
    at that δ. So neither a second spec with a larger cap (or none) nor a release at another δ
    spends more on the same data. ``before``: phases this release runs on the data before
    ``phase`` (a model release: its mixture's); ``parts``: the part of the data each of
    ``(*before, phase)`` runs on (default: all of it); ``epsilon``: the release's own claim.
    ``aliases``: the digests earlier layouts keyed this data by, migrated to ``data_sha256``."""
    require(identity in IDENTITIES, f"identity must be one of {IDENTITIES}, got {identity!r}")
    parts = parts or (ALL,) * (len(before) + 1)
    require(len(parts) == len(before) + 1 and all(is_part(p) for p in parts), f"bad parts {parts!r}")
    with _locked(path) as real:
        datasets, entries = read_state(real)
        merged, datasets, entries = _merged(datasets, entries, data_sha256, problem_sha256, aliases)
        fixed = merged or Dataset(budget, delta, timestamp, identity=identity)
        fixed = replace(fixed, identity=identity or fixed.identity)
        _check_fixed(fixed, budget, delta, data_sha256)
        charges = tuple(zip((*before, phase), parts, strict=True))
        total = None  # uncapped: composed after the lock (:func:`standing`), recorded at the commit
        if fixed.budget_epsilon is not None:
            total = spent(
                entries,
                data_sha256,
                problem_sha256=problem_sha256,
                delta=fixed.delta,
                extra=charges,
                aliases=aliases,
                claims=(epsilon,),
            )
            if total > fixed.budget_epsilon:
                earlier = spent(
                    entries, data_sha256, problem_sha256=problem_sha256, delta=fixed.delta, extra=(), aliases=aliases
                )
                raise OverBudget(earlier, total, fixed.budget_epsilon)
        entry = Entry(
            id=uuid.uuid4().hex,
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
        _write(real, [*entries, entry], {**datasets, data_sha256: fixed})
        return entry.id


def entry(path: Path, reservation: str) -> Entry:
    """The ledger's entry (or reservation) ``reservation``."""
    entries = read(path)
    return entries[_find(entries, reservation, path)]


def standing(
    path: Path, data_sha256: str, problem_sha256: str, aliases: tuple[str, ...] = ()
) -> tuple[float, float | None, float]:
    """(ε spent, the cap, δ) on this data: what a release says ("spent X of Y on this data")."""
    datasets, entries = read_state(path)
    fixed = datasets.get(data_sha256)
    require(fixed is not None, f"the privacy ledger {path} has no data set {data_sha256[:16]}")
    assert fixed is not None
    return (
        spent(entries, data_sha256, problem_sha256=problem_sha256, delta=fixed.delta, extra=(), aliases=aliases),
        fixed.budget_epsilon,
        fixed.delta,
    )


def set_budget(path: Path, data: str, budget: float | None, timestamp: str) -> Dataset:
    """Change a data set's cap, explicitly, logged in its ``changes`` (``data``: its digest or a
    prefix of at least 8 characters that names one data set)."""
    require(budget is None or (math.isfinite(budget) and budget > 0), f"a budget must be > 0, got {budget}")
    with _locked(path) as real:
        datasets, entries = read_state(real)
        matches = [key for key in datasets if key.startswith(data)] if len(data) >= 8 else []
        require(len(matches) == 1, f"{data!r} names {len(matches)} data sets in the ledger {path} (give 8+ characters)")
        key = matches[0]
        old = datasets[key]
        change = {"from": old.budget_epsilon, "to": budget, "timestamp": timestamp}
        datasets[key] = Dataset(budget, old.delta, old.since, (*old.changes, change))
        _write(real, entries, datasets)
        return datasets[key]


def _find(entries: list[Entry], reservation: str, path: Path) -> int:
    where = [i for i, e in enumerate(entries) if e.id == reservation]
    require(len(where) == 1, f"the privacy ledger {path} lost reservation {reservation}")
    return where[0]


def commit(path: Path, reservation: str, manifest_sha256: str, spent_epsilon: float | None = None) -> None:
    """The reservation becomes the release's entry, naming its manifest by digest (a path would
    record where a machine keeps its files; the digest is what identifies the release), with the
    spend its manifest states where the reservation did not record one (an uncapped data set)."""
    with _locked(path) as real:
        datasets, entries = read_state(real)
        i = _find(entries, reservation, path)
        recorded = entries[i].spent_epsilon
        entries[i] = replace(
            entries[i],
            status="released",
            manifest_sha256=manifest_sha256,
            spent_epsilon=recorded if recorded is not None else spent_epsilon,
        )
        _write(real, entries, datasets)


def withdraw(path: Path, reservation: str) -> None:
    """Remove a reservation whose release was refused (nothing was published, nothing was spent)."""
    with _locked(path) as real:
        datasets, entries = read_state(real)
        gone = entries.pop(_find(entries, reservation, path))
        if not any(e.data_sha256 == gone.data_sha256 for e in entries):  # nothing spent: nothing fixed
            datasets.pop(gone.data_sha256, None)
        _write(real, entries, datasets)
