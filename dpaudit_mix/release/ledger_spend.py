"""What a data set's releases spend together: each phase charged to the part of the data it ran
on (all of it, or one side of a partition), parallel sides by their worst, everything on one part
sequentially (PLD), never below any release's own claim."""

from __future__ import annotations

from itertools import product

from .. import accounting
from ..accounting.phases import MAX_STEPS
from ..base.identity import ALL, split_part
from .ledger_records import MAX_PARTITIONS, Entry

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
            worst = max(worst, accounting.epsilon(compacted(phases), delta, "pld"))
    return max((worst, *claims))


def compacted(phases: list[accounting.GaussianPhase]) -> list[accounting.GaussianPhase]:
    """The same composition in the fewest phases: composition commutes, and T₁ then T₂ steps of
    one (σ, q) mechanism are T₁ + T₂ steps of it, so phases of one (σ, q) merge (in pieces of at
    most ``MAX_STEPS``). A data set's thousand releases of one configuration cost one PLD
    composition, not a thousand."""
    steps: dict[tuple[float, float], int] = {}
    for p in phases:
        steps[(p.noise_multiplier, p.sample_rate)] = steps.get((p.noise_multiplier, p.sample_rate), 0) + p.steps
    pieces = []
    for (sigma, q), total in steps.items():
        while total > 0:
            piece = min(total, MAX_STEPS)
            pieces.append(accounting.GaussianPhase(sigma, q, piece))
            total -= piece
    return pieces


def spent(
    entries: list[Entry],
    data_sha256: str,
    *,
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
