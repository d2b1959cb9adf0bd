"""The privacy-budget ledger: every release on one sensitive data set, composed in the PLD accountant.

Releasing twice on the same data spends budget twice, so the ledger keys releases by the data
they spend: the identity of the sensitive data set (:mod:`..identity`), one key for λ and model
releases alike; a problem that does not know where it came from falls back to the digest of its
rows. Each entry records what every phase spent on which part of the data (all of it, or one
side of a partition, such as the pipeline's split A and split B), so that phases on disjoint
parts compose in parallel (the worst part) and everything on one part sequentially (PLD), at the
data's δ: the remaining budget is the cap minus exactly what the releases compose to, never
less than any one release's own claim.

The ledger is a critical section (DESIGN §11). :func:`reserve` checks the budget and appends a
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
from dataclasses import asdict, dataclass, fields, replace
from itertools import product
from pathlib import Path
from typing import Any

from .. import accounting
from ..atomic import write_bytes
from ..cache import sha256_bytes, user_state_dir
from ..errors import InputError, require
from ..identity import ALL, is_part, split_part

FORMAT = "dpaudit-mix privacy ledger v5"
STATUSES = ("reserved", "released")
#: what a data set's key hashes: its sensitive data's identity, or (a problem that does not know
#: where it came from) its rows; "" for a data set an earlier layout recorded.
IDENTITIES = ("sensitive", "rows", "")
#: partitions composed exactly (every choice of one side in each); any further ones count as all
#: of the data (an over-count: sound).
MAX_PARTITIONS = 6


def default_path() -> Path:
    """``$DPAUDIT_MIX_LEDGER``, else ``ledger.json`` in the user state folder: one ledger for every
    release on this machine, wherever its ``--out`` is."""
    if os.environ.get("DPAUDIT_MIX_LEDGER"):
        return Path(os.environ["DPAUDIT_MIX_LEDGER"])
    return user_state_dir() / "ledger.json"


@dataclass(frozen=True)
class Entry:
    """One release (or a reservation for one): its data, its Gaussian phase and where it went."""

    id: str
    status: str
    data_sha256: str
    epsilon: float
    delta: float
    noise_multiplier: float
    sample_rate: float
    steps: int
    user_level: bool
    timestamp: str
    problem_sha256: str = ""  # the problem file's bytes (v1 ledgers keyed entries by these)
    manifest: str = ""
    manifest_sha256: str = ""
    #: (σ, q, T) of the phases run on this data before ``phase`` (a model release: its mixture's)
    before: tuple[tuple[float, float, int], ...] = ()
    #: the part of the data each of ``phases`` ran on (:data:`..identity.ALL` or a partition's
    #: side); empty: all of it (every entry before v5)
    parts: tuple[str, ...] = ()
    kind: str = ""  # "lambda" or "model" ("" before v5)
    #: what the ledger said of the data with this release counted (the manifest's budget section
    #: states it; check-release compares the two): composed under the lock where the data has a
    #: cap, else just after the reservation and recorded at the commit; the cap when reserved
    spent_epsilon: float | None = None
    budget_epsilon: float | None = None

    @property
    def phase(self) -> accounting.GaussianPhase:
        return accounting.GaussianPhase(self.noise_multiplier, self.sample_rate, self.steps)

    @property
    def phases(self) -> tuple[accounting.GaussianPhase, ...]:
        """Everything this release ran on its data, composed by the ledger."""
        return (*(accounting.GaussianPhase(*p) for p in self.before), self.phase)

    @property
    def charges(self) -> tuple[tuple[accounting.GaussianPhase, str], ...]:
        """Each phase with the part of the data it ran on."""
        parts = self.parts or (ALL,) * len(self.phases)
        return tuple(zip(self.phases, parts, strict=True))

    def on(self, data_sha256: str, problem_sha256: str, aliases: tuple[str, ...] = ()) -> bool:
        """Whether this entry spent budget on that data (a v1 entry knows the file's bytes only;
        ``aliases`` are the older digests of the same data that v2 entries carry)."""
        return (bool(self.data_sha256) and self.data_sha256 in (data_sha256, *aliases)) or (
            not self.data_sha256 and self.problem_sha256 == problem_sha256
        )


@dataclass(frozen=True)
class Dataset:
    """What the ledger fixes for one data set at its first release: its cap (None: uncapped, as
    that release chose) and the one δ every release on it is composed at; ``changes`` logs each
    explicit change of the cap (``dpaudit-mix ledger set-budget``)."""

    budget_epsilon: float | None
    delta: float
    since: str
    changes: tuple[dict[str, Any], ...] = ()
    identity: str = ""  # what the key hashes (IDENTITIES)
    #: the keys an earlier layout recorded this data under, whose entries and cap were carried over
    aliases: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "changes": list(self.changes), "aliases": list(self.aliases)}


class Conflict(Exception):
    """A release that would change what the ledger fixed for its data (the cap or δ)."""


def _number(raw: dict[str, Any], key: str, where: str) -> float:
    value = raw.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise InputError(f"{where}: '{key}' must be a finite number, got {value!r}")
    return float(value)


def _text(raw: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str):
        raise InputError(f"{where}: '{key}' must be a string, got {value!r}")
    return value


def _entry(raw: object, where: str) -> Entry:
    """An entry from its JSON, every field checked (a v1 entry: released, keyed by file bytes)."""
    if not isinstance(raw, dict):
        raise InputError(f"{where} is not an object: {raw!r}")
    steps = raw.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool):
        raise InputError(f"{where}: 'steps' must be an integer, got {steps!r}")
    require(isinstance(raw.get("user_level"), bool), f"{where}: 'user_level' must be true or false")
    unknown = sorted(set(raw) - {f.name for f in fields(Entry)})
    require(not unknown, f"{where}: unknown key(s) {unknown} (a newer ledger?); refusing to guess what was spent")
    entry = Entry(
        id=_text(raw, "id", where, ""),
        status=_text(raw, "status", where, "released"),
        data_sha256=_text(raw, "data_sha256", where, ""),
        epsilon=_number(raw, "epsilon", where),
        delta=_number(raw, "delta", where),
        noise_multiplier=_number(raw, "noise_multiplier", where),
        sample_rate=_number(raw, "sample_rate", where),
        steps=steps,
        user_level=raw["user_level"],
        timestamp=_text(raw, "timestamp", where),
        problem_sha256=_text(raw, "problem_sha256", where, ""),
        manifest=_text(raw, "manifest", where, ""),
        manifest_sha256=_text(raw, "manifest_sha256", where, ""),
        before=_before(raw.get("before", []), where),
        parts=_parts(raw.get("parts", []), where),
        kind=_text(raw, "kind", where, ""),
        spent_epsilon=_optional_number(raw, "spent_epsilon", where),
        budget_epsilon=_optional_number(raw, "budget_epsilon", where),
    )
    require(
        not entry.parts or len(entry.parts) == len(entry.before) + 1,
        f"{where}: 'parts' names {len(entry.parts)} parts for {len(entry.before) + 1} phases",
    )
    require(entry.status in STATUSES, f"{where}: 'status' must be one of {STATUSES}, got {entry.status!r}")
    require(bool(entry.data_sha256 or entry.problem_sha256), f"{where}: names no data (data_sha256)")
    require(
        entry.epsilon > 0 and 0 < entry.delta < 1, f"{where}: epsilon {entry.epsilon}, delta {entry.delta} out of range"
    )
    try:
        _ = entry.phases  # σ, q and T within the accountant's ranges
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return entry


def _before(raw: Any, where: str) -> tuple[tuple[float, float, int], ...]:
    """An entry's earlier phases: a list of [σ, q, T]."""
    require(isinstance(raw, list), f"{where}: 'before' must be a list of [sigma, q, T], got {raw!r}")
    phases = []
    for item in raw:
        ok = (
            isinstance(item, list)
            and len(item) == 3
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in item[:2])
            and isinstance(item[2], int)
            and not isinstance(item[2], bool)
        )
        require(ok, f"{where}: 'before' holds {item!r}, not [sigma, q, T]")
        phases.append((float(item[0]), float(item[1]), int(item[2])))
    return tuple(phases)


def _optional_number(raw: dict[str, Any], key: str, where: str) -> float | None:
    return None if raw.get(key) is None else _number(raw, key, where)


def _parts(raw: Any, where: str) -> tuple[str, ...]:
    """An entry's parts: a list of "all" or "<partition sha256>:<side>"."""
    require(
        isinstance(raw, list) and all(is_part(p) for p in raw),
        f"{where}: 'parts' must be a list of 'all' or '<partition>:<side>', got {raw!r}",
    )
    return tuple(raw)


def _dataset(raw: object, where: str) -> Dataset:
    require(isinstance(raw, dict), f"{where} is not an object: {raw!r}")
    assert isinstance(raw, dict)
    cap = raw.get("budget_epsilon")
    budget = None if cap is None else _number(raw, "budget_epsilon", where)
    changes = raw.get("changes", [])
    require(isinstance(changes, list) and all(isinstance(c, dict) for c in changes), f"{where}: bad 'changes'")
    aliases = raw.get("aliases", [])
    require(isinstance(aliases, list) and all(isinstance(a, str) for a in aliases), f"{where}: bad 'aliases'")
    identity = _text(raw, "identity", where, "")
    require(identity in IDENTITIES, f"{where}: 'identity' must be one of {IDENTITIES[:2]}, got {identity!r}")
    dataset = Dataset(
        budget, _number(raw, "delta", where), _text(raw, "since", where), tuple(changes), identity, tuple(aliases)
    )
    require(0 < dataset.delta < 1 and (budget is None or budget > 0), f"{where}: delta or budget out of range")
    unknown = sorted(set(raw) - {f.name for f in fields(Dataset)})
    require(not unknown, f"{where}: unknown key(s) {unknown} (a newer ledger?); refusing to guess what was spent")
    return dataset


def _parse(path: Path, text: str) -> tuple[dict[str, Dataset], list[Entry]]:
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"the privacy ledger {path} is not JSON ({exc!r}); refusing to guess what was spent") from None
    require(
        isinstance(body, dict) and isinstance(body.get("releases"), list),
        f"the privacy ledger {path} has no 'releases' list; refusing to guess what was spent",
    )
    datasets = body.get("datasets", {})  # absent before v3: every data set's first new release fixes it
    require(isinstance(datasets, dict), f"the privacy ledger {path}: 'datasets' is not an object")
    return (
        {key: _dataset(raw, f"the privacy ledger {path}, data set {key[:16]}") for key, raw in datasets.items()},
        [_entry(raw, f"the privacy ledger {path}, entry {i}") for i, raw in enumerate(body["releases"])],
    )


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
    return _parse(path, text)


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


#: a phase and the part of the data it ran on (:data:`..identity.ALL`, or one side of a partition).
Charge = tuple[accounting.GaussianPhase, str]


def composed(charges: list[Charge], delta: float, claims: tuple[float, ...] = ()) -> float:
    """ε at ``delta`` of ``charges`` on one data set: for every choice of one side in each
    partition, every phase on all of the data or on a chosen side, composed by PLD; the worst
    choice, since each example lies on one side of each partition (parallel composition across
    the sides, sequential within one). Never below any of ``claims``: a release's own stated ε
    (its accountant's; PLD may put its phases a little lower) is what it spent."""
    sides: dict[str, set[str]] = {}
    for _, part in charges:
        named = split_part(part)
        if named is not None:
            sides.setdefault(named[0], set()).add(named[1])
    partitions = sorted(sides)[:MAX_PARTITIONS]
    worst = 0.0
    for choice in product(*(sorted(sides[p]) for p in partitions)):
        chosen = {f"{p}:{side}" for p, side in zip(partitions, choice, strict=True)}
        phases = [
            phase
            for phase, part in charges
            if part == ALL or part in chosen or (split_part(part) or ("", ""))[0] not in partitions
        ]
        if phases:
            worst = max(worst, accounting.epsilon(phases, delta, "pld"))
    return max((worst, *claims))


def spent(
    entries: list[Entry],
    data_sha256: str,
    problem_sha256: str,
    delta: float,
    extra: tuple[Charge | accounting.GaussianPhase, ...] = (),
    aliases: tuple[str, ...] = (),
    claims: tuple[float, ...] = (),
) -> float:
    """ε at ``delta`` of every entry (reservations too) on this data, plus ``extra`` (a release
    not yet reserved, whose own claims are ``claims``; a bare phase runs on all of the data),
    composed as :func:`composed` does."""
    mine = [e for e in entries if e.on(data_sha256, problem_sha256, aliases)]
    more = [(c, ALL) if isinstance(c, accounting.GaussianPhase) else c for c in extra]
    charges = [c for e in mine for c in e.charges] + more
    return composed(charges, delta, (*(e.epsilon for e in mine), *claims)) if charges else 0.0


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
        charges = tuple(zip((*before, phase), parts, strict=True))
        total = None  # uncapped: composed after the lock (:func:`standing`), recorded at the commit
        if fixed.budget_epsilon is not None:
            total = spent(entries, data_sha256, problem_sha256, fixed.delta, charges, aliases, (epsilon,))
            if total > fixed.budget_epsilon:
                earlier = spent(entries, data_sha256, problem_sha256, fixed.delta, (), aliases)
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
    return spent(entries, data_sha256, problem_sha256, fixed.delta, (), aliases), fixed.budget_epsilon, fixed.delta


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
