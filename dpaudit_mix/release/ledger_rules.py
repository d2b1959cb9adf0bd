"""The rules a reservation is held to, before its row is written: the data's cap and δ are fixed
by its first release (and carried over from the keys an earlier layout gave the data), its unit
(example or user level) by its first release too, and its cap holds with this release counted."""

from __future__ import annotations

import math

from .. import accounting
from .ledger_records import Conflict, Dataset, Entry
from .ledger_spend import spent


class OverBudget(Exception):
    """The reservation would take the data past its budget: nothing was written."""

    def __init__(self, before: float, after: float, budget: float = math.inf) -> None:
        super().__init__(f"{before:.4g} -> {after:.4g} of {budget:g}")
        self.before, self.after, self.budget = before, after, budget


def merged_dataset(
    datasets: dict[str, Dataset], entries: list[Entry], key: str, problem_sha256: str, aliases: tuple[str, ...]
) -> Dataset | None:
    """The data set ``key`` with what an earlier layout recorded for the same data under
    ``aliases``: their caps merged (the smallest holds; δ must agree), the old keys kept in its
    ``aliases`` (the entries follow in the fold)."""
    found = [k for k in (key, *aliases) if k in datasets]
    if not found:
        return None
    olds = [datasets[k] for k in found]
    deltas = {d.delta for d in olds}
    if len(deltas) > 1:
        raise Conflict(
            f"this data was recorded at several deltas {sorted(deltas)} under the ledger's older keys "
            f"{', '.join(k[:16] for k in found)}; compose them by hand and keep one (`dpaudit-mix ledger show`)"
        )
    caps = [d.budget_epsilon for d in olds if d.budget_epsilon is not None]
    return Dataset(
        min(caps) if caps else None,
        olds[0].delta,
        min(d.since for d in olds),
        tuple(c for d in olds for c in d.changes),
        datasets[key].identity if key in datasets else "",
        tuple(dict.fromkeys((*(a for d in olds for a in d.aliases), *(k for k in found if k != key)))),
    )


def check_fixed(fixed: Dataset, budget: float | None, delta: float, data_sha256: str) -> None:
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


def within_cap(
    entries: list[Entry],
    fixed: Dataset,
    data_sha256: str,
    problem_sha256: str,
    aliases: tuple[str, ...],
    charges: tuple[tuple[accounting.GaussianPhase, str], ...],
    *,
    epsilon: float,
) -> float | None:
    """The data's spend with a release's ``charges`` counted, where the data has a cap (None:
    uncapped, composed after the reservation and recorded at the commit); :class:`OverBudget`
    past the cap."""
    if fixed.budget_epsilon is None:
        return None
    delta = fixed.delta
    total = spent(
        entries,
        data_sha256,
        problem_sha256=problem_sha256,
        delta=delta,
        extra=charges,
        aliases=aliases,
        claims=(epsilon,),
    )
    if total > fixed.budget_epsilon:
        earlier = spent(entries, data_sha256, problem_sha256=problem_sha256, delta=delta, aliases=aliases)
        raise OverBudget(earlier, total, fixed.budget_epsilon)
    return total


def check_unit(
    entries: list[Entry], data_sha256: str, problem_sha256: str, aliases: tuple[str, ...], user_level: bool
) -> None:
    """A :class:`Conflict` when the data set's releases are of the other unit."""
    levels = {e.user_level for e in entries if e.on(data_sha256, problem_sha256, aliases)}
    if levels and levels != {user_level}:
        had, asked = ("example", "user") if user_level else ("user", "example")
        raise Conflict(
            f"this data set's releases are at {had} level; a {asked}-level release cannot be composed with them "
            f"(an example-level epsilon is a user-level one only by group privacy at the largest user's rows): "
            f"release at {had} level"
        )
