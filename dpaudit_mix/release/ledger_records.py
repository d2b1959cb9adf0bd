"""The ledger's records: an :class:`Entry` per release (or reservation) and a :class:`Dataset`
per sensitive data set (its cap, δ and identity), each read back with one check per field, so a
ledger that fails them refuses with the entry it stopped at."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from .. import accounting
from ..base import strict_json
from ..base.errors import InputError, require
from ..base.identity import ALL, is_part

FORMAT = "dpaudit-mix privacy ledger v5"
STATUSES = ("reserved", "released")
#: what a data set's key hashes: its sensitive data's identity, or (a problem that does not know
#: where it came from) its rows; "" for a data set an earlier layout recorded.
IDENTITIES = ("sensitive", "rows", "")
#: partitions composed exactly (every choice of one side in each); any further ones count as all
#: of the data (an over-count: sound).
MAX_PARTITIONS = 6


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


def parse(path: Path, text: str) -> tuple[dict[str, Dataset], list[Entry]]:
    body = strict_json.loads(text, f"the privacy ledger {path} (refusing to guess what was spent)")
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
