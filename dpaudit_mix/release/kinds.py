"""Release kinds: what differs between releasing λ and releasing a model, given to the one
protocol of :mod:`.gate` (calibrate → check the accountant → size the audit → reserve → work →
sign and check → write → commit, or withdraw).

A kind is registered like a mechanism (:func:`register_release_kind`). λ is built in
(:mod:`.lambda_kind`); the model kind lives in the pipeline layer, above this one, and is
registered through the entry point ``dpaudit_mix.release_kinds`` the first time a spec names it,
so this layer never imports the pipeline and a λ release never loads it. A kind supplies:

- ``files``: what it publishes beside release.json (removed on any failure: they go out with
  their signed manifest, or not at all);
- ``parts``: what its release runs, so what verify-accountant checks before its work;
- ``prepare``: everything fixed before a unit of privacy is spent (the claim calibrated, its
  accountant checked, its audit sized, every input error raised), and the ledger charge; it is
  given the keys whose signatures it may believe (``trusted``: this machine's and the ledger's);
- ``work``: the private work, given the reservation, returning the unsigned manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .. import accounting
from ..base.errors import require
from ..base.registry import Registry
from ..base.specfile import spec_table
from ..verification.suite import Verification
from .manifest import Budget, Digested, Publication
from .refused import Refused


@dataclass(frozen=True)
class Charge:
    """What a release reserves on the ledger (:func:`.ledger.reserve`'s request, less the time)."""

    data_sha256: str  # the ledger's key of the sensitive data
    problem_sha256: str
    epsilon: float  # the release's own claim
    delta: float
    phase: accounting.GaussianPhase
    user_level: bool
    budget: float | None  # the spec's cap
    kind: str
    identity: str
    aliases: tuple[str, ...] = ()  # the keys earlier ledger layouts gave this data
    before: tuple[accounting.GaussianPhase, ...] = ()  # phases run on the data before ``phase``
    parts: tuple[str, ...] = ()  # the part of the data each of (*before, phase) runs on
    max_rows_per_user: int = 0  # at user level, the largest user's rows (the unit's size)

    def request(self) -> dict[str, Any]:
        """The charge as :func:`.ledger.reserve`'s keywords (its phases kept as phases)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Asked:
    """What a release is asked: the spec (its path and its bytes, read once), the folder, a σ
    larger than the calibrated one (or None), whether to show progress, and the keys whose
    signatures it may believe (this machine's and the ledger's, by fingerprint)."""

    spec_path: Path
    spec_bytes: bytes
    out: Path
    noise_multiplier: float | None
    progress: bool
    trusted: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Prepared:
    """A release fixed before anything is spent: its charge, the data its publication names, the
    problem bytes check-release rebuilds from (None where it rebuilds from the spec), and the
    kind's own state for its work."""

    charge: Charge
    data: dict[str, str]
    problem: bytes | None
    state: Any


@dataclass(frozen=True)
class Work:
    """What a kind's work is given: the folder to write its files into (a staging folder beside
    ``--out``, moved in whole once the manifest is signed and checked), the reservation's budget
    and publication, and the protocol's verify-accountant of the kind's parts (``verified()``:
    the passed verification, else :class:`Refused`), for the work to run where it fits."""

    out: Path
    progress: bool
    budget: Budget
    publication: Publication
    verified: Callable[[], Verification] = field(repr=False)


class ReleaseKind(Protocol):
    """One kind of release (see the module docstring)."""

    files: tuple[str, ...]
    parts: frozenset[str]

    def prepare(self, asked: Asked) -> Prepared: ...

    def work(self, prepared: Prepared, work: Work) -> Digested: ...


def _check_kind(name: str, kind: ReleaseKind) -> None:
    for attribute in ("files", "parts", "prepare", "work"):
        require(hasattr(kind, attribute), f"release kind {name!r} has no {attribute!r}")


#: every release kind, by the name a spec's shape gives (:func:`spec_kind`).
RELEASE_KINDS: Registry[ReleaseKind] = Registry("release kind", "release_kinds", _check_kind, plugins="on-miss")


def register_release_kind(name: str, kind: ReleaseKind, *, replace: bool = False) -> ReleaseKind:
    """Register ``kind`` under ``name``; returns it.

    Args:
      name: the kind's name (``lambda`` and ``model`` are the package's).
      kind: what the kind supplies to the protocol (:class:`ReleaseKind`).
      replace: whether it may replace a kind of that name.

    Returns:
      ``kind``.

    Raises:
      InputError: a bad name, an incomplete kind, or a name taken (without ``replace``).
    """
    return RELEASE_KINDS.register(name, kind, replace=replace)


def spec_kind(path: Path, content: bytes) -> str:
    """The kind a release spec releases: a model where it names a pipeline, else λ."""
    return "model" if "pipeline" in spec_table(path, content) else "lambda"


def released_sigma(calibrated: float, noise_multiplier: float | None) -> float:
    """The σ a release runs: the claim's calibrated one, or a larger one the caller asks for
    (more noise than the claim needs). A smaller one is refused (exit 3) before anything is
    spent: its release would claim more than it delivers (simulate a leak with ``audit``)."""
    if noise_multiplier is None:
        return calibrated
    require(
        np.isfinite(noise_multiplier) and noise_multiplier > 0,
        f"noise multiplier must be finite and > 0, got {noise_multiplier}",
    )
    if noise_multiplier < calibrated:
        raise Refused(
            "claim",
            f"noise multiplier {noise_multiplier:.6g} is below the {calibrated:.6g} the claim is calibrated to: a "
            "release never claims more than its noise gives (`dpaudit-mix audit --noise-multiplier` simulates a leak)",
        )
    return noise_multiplier


def verification_record(verification: Verification) -> dict[str, Any]:
    """The manifest's verification section: the level, the checks that ran, and that they passed."""
    return {
        "level": verification.level,
        "passed": verification.passed,
        "checks": [c.name for c in verification.checks],
        "seconds": verification.seconds,
    }


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
