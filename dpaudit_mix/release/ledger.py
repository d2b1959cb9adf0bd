"""The privacy-budget ledger: every release on one data set, composed in the PLD accountant.

Releasing twice on the same data spends budget twice (sequential composition), so the ledger
keys releases by the data (the digest of the problem's ``logp`` and ``users``, not of a file's
bytes or path: an extra array or a copy elsewhere is the same data) and composes all of their
phases at the new release's δ before the next one may go out.

The ledger is a critical section (DESIGN §11). :func:`reserve` checks the budget and appends a
*reservation* under an exclusive lock, before verification starts; :func:`commit` turns it into
the release's entry (with its manifest's digest), :func:`withdraw` removes it after a refusal. A
crash leaves the reservation standing: the budget is over-counted, never under-counted, and two
releases started together serialise on the lock and cannot spend one budget twice.

A ledger that cannot be read (truncated, not JSON, an entry failing its checks) refuses with the
entry it stopped at; it never reads as empty. Its lock file records the sha256 of the ledger as
last written here, so a ledger deleted, emptied or edited behind the package's back refuses too
(an operator who means it deletes the lock file). Symlinks are resolved, so a shared ledger is
written through, never replaced.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import accounting
from ..atomic import write_bytes
from ..cache import sha256_bytes, user_state_dir
from ..errors import InputError, require

FORMAT = "dpaudit-mix privacy ledger v2"
STATUSES = ("reserved", "released")


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

    @property
    def phase(self) -> accounting.GaussianPhase:
        return accounting.GaussianPhase(self.noise_multiplier, self.sample_rate, self.steps)

    def on(self, data_sha256: str, problem_sha256: str) -> bool:
        """Whether this entry spent budget on that data (a v1 entry knows the file's bytes only)."""
        return (bool(self.data_sha256) and self.data_sha256 == data_sha256) or (
            not self.data_sha256 and self.problem_sha256 == problem_sha256
        )


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
    )
    require(entry.status in STATUSES, f"{where}: 'status' must be one of {STATUSES}, got {entry.status!r}")
    require(bool(entry.data_sha256 or entry.problem_sha256), f"{where}: names no data (data_sha256)")
    require(
        entry.epsilon > 0 and 0 < entry.delta < 1, f"{where}: epsilon {entry.epsilon}, delta {entry.delta} out of range"
    )
    try:
        _ = entry.phase  # σ, q and T within the accountant's ranges
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return entry


def _parse(path: Path, text: str) -> list[Entry]:
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"the privacy ledger {path} is not JSON ({exc!r}); refusing to guess what was spent") from None
    require(
        isinstance(body, dict) and isinstance(body.get("releases"), list),
        f"the privacy ledger {path} has no 'releases' list; refusing to guess what was spent",
    )
    return [_entry(raw, f"the privacy ledger {path}, entry {i}") for i, raw in enumerate(body["releases"])]


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
    real = _real(path)
    lock = _lock_path(real)
    recorded = _recorded(lock)
    if not real.exists():
        require(
            not recorded,
            f"the privacy ledger {path} is missing but its lock file {lock} shows it was written; "
            "restore it (a deleted ledger is not 'nothing spent')",
        )
        return []
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
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(_lock_path(real), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise InputError(f"cannot use the privacy ledger {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield real
    finally:
        os.close(fd)  # releases the lock (so does the death of the process)


def _write(real: Path, entries: list[Entry]) -> None:
    """The ledger, then its digest in the lock file (a crash between the two refuses: fails closed)."""
    content = (json.dumps({"format": FORMAT, "releases": [asdict(e) for e in entries]}, indent=2) + "\n").encode()
    write_bytes(real, content)
    _lock_path(real).write_text(sha256_bytes(content) + "\n", encoding="utf-8")


def spent(
    entries: list[Entry],
    data_sha256: str,
    problem_sha256: str,
    delta: float,
    extra: tuple[accounting.GaussianPhase, ...] = (),
) -> float:
    """ε at ``delta`` of every entry (reservations too) on this data, plus ``extra``, composed in PLD."""
    phases = [e.phase for e in entries if e.on(data_sha256, problem_sha256)] + list(extra)
    return accounting.epsilon(phases, delta, "pld") if phases else 0.0


class OverBudget(Exception):
    """The reservation would take the data past its budget: nothing was written."""

    def __init__(self, before: float, after: float) -> None:
        super().__init__(f"{before:.4g} -> {after:.4g}")
        self.before, self.after = before, after


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
) -> str:
    """Check the budget and append a reservation, atomically; its id, or :class:`OverBudget`."""
    with _locked(path) as real:
        entries = read(real)
        if budget is not None:
            total = spent(entries, data_sha256, problem_sha256, delta, (phase,))
            if total > budget:
                raise OverBudget(spent(entries, data_sha256, problem_sha256, delta), total)
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
        )
        _write(real, [*entries, entry])
        return entry.id


def _find(entries: list[Entry], reservation: str, path: Path) -> int:
    where = [i for i, e in enumerate(entries) if e.id == reservation]
    require(len(where) == 1, f"the privacy ledger {path} lost reservation {reservation}")
    return where[0]


def commit(path: Path, reservation: str, manifest_sha256: str) -> None:
    """The reservation becomes the release's entry, naming its manifest by digest (a path would
    record where a machine keeps its files; the digest is what identifies the release)."""
    with _locked(path) as real:
        entries = read(real)
        i = _find(entries, reservation, path)
        entries[i] = Entry(
            **{
                **asdict(entries[i]),
                "status": "released",
                "manifest_sha256": manifest_sha256,
            }
        )
        _write(real, entries)


def withdraw(path: Path, reservation: str) -> None:
    """Remove a reservation whose release was refused (nothing was published, nothing was spent)."""
    with _locked(path) as real:
        entries = read(real)
        del entries[_find(entries, reservation, path)]
        _write(real, entries)
