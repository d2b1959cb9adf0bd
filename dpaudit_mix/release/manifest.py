"""A published release.json, as types: its claim, budget and sections (:class:`Manifest`), the
digest that binds them, its signature, the files it publishes, and the paths it may name.
check-release reads a manifest as untrusted JSON (:mod:`.check`); the gate writes one through
:meth:`Manifest.to_dict`."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..base.cache import json_sha256, sha256_bytes
from ..base.errors import require


@dataclass(frozen=True)
class LambdaClaim:
    """A λ release's record of its claim: (ε, δ) with the accountant that calibrated σ, ε under
    every built-in accountant, and the mechanism's settings."""

    epsilon: float
    delta: float
    accountant: str
    epsilon_by_accountant: dict[str, float]
    noise_multiplier: float
    calibrated_noise_multiplier: float
    sample_rate: float
    steps: int
    clip: float
    learning_rate: float
    user_level: bool


@dataclass(frozen=True)
class Budget:
    """What the ledger says of the data with this release counted (composed at its δ)."""

    spent_epsilon: float
    budget_epsilon: float | None
    delta: float


@dataclass(frozen=True)
class Publication:
    """What every release.json carries besides its sections: the release's id (its ledger entry),
    the data set it spent (its ledger key and what that hashes), every other file it publishes
    with its sha256, and the signature (added last, over everything else)."""

    release_id: str
    data: dict[str, str]  # {"sha256": the ledger's key, "identity": "sensitive" | "rows"}
    files: dict[str, str] = field(default_factory=dict)  # name (beside release.json) → sha256
    signature: dict[str, str] | None = None
    #: the ledger it was charged on: {"url": no password, "head": {"row", "sha256"} of its reservation}
    ledger: dict[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        found = {"release_id": self.release_id, "data": dict(self.data), "files": dict(self.files)}
        return {**found, "ledger": self.ledger} if self.ledger else found


class Digested:
    """A manifest whose release.json is its ``body()``, the digest over it and its signature,
    and the budget the ledger recorded (what the gate's protocol commits)."""

    publication: Publication
    budget: Budget

    def body(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def digest(self) -> str:
        return manifest_digest(self.body())

    def to_dict(self) -> dict[str, Any]:
        signature = self.publication.signature
        return {
            **self.body(),
            "manifest_sha256": self.digest,
            **({} if signature is None else {"signature": signature}),
        }


def published_files(out: Path, names: tuple[str, ...]) -> dict[str, str]:
    """The sha256 of each file a release publishes beside release.json (each must be there)."""
    found = {}
    for name in names:
        path = out / name
        require(path.is_file() and not path.is_symlink(), f"the release's {name} was not written to {out}")
        found[name] = sha256_bytes(path.read_bytes())
    return found


@dataclass(frozen=True)
class Manifest(Digested):
    """release.json: λ over ``sources``, what was claimed and checked, and its own digest.
    ``inputs``, ``spec``, ``verification`` and ``audit`` are the JSON sections check-release reads."""

    weights: tuple[float, ...]
    sources: tuple[str, ...]
    task: str | None
    claim: LambdaClaim
    inputs: dict[str, str]
    spec: dict[str, Any]
    verification: dict[str, Any]
    audit: dict[str, Any]
    budget: Budget
    timestamp: str
    publication: Publication

    def body(self) -> dict[str, Any]:
        """Every section, in release.json's order, without the digest and the signature."""
        return {
            **self.publication.fields(),
            "weights": list(self.weights),
            "sources": list(self.sources),
            "task": self.task,
            "claim": asdict(self.claim),
            "inputs": dict(self.inputs),
            "spec": dict(self.spec),
            "verification": dict(self.verification),
            "audit": dict(self.audit),
            "budget": asdict(self.budget),
            "timestamp": self.timestamp,
        }


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 over the canonical JSON of every field but the digest itself and the signature
    (which signs the digest with the rest)."""
    body = {k: v for k, v in manifest.items() if k not in ("manifest_sha256", "signature")}
    return json_sha256(body, compact=True).hexdigest()


def public_path(path: Path, out: Path) -> str:
    """A file as a published manifest may name it: relative to the release folder ``out`` when it
    lies under that folder's parent (check-release finds it from there), else by its name alone:
    a machine's absolute paths, and the folders above, are not for publication."""
    relative = Path(os.path.relpath(path.resolve(), out.resolve()))
    return str(relative) if relative.parts[:2].count("..") <= 1 and not relative.is_absolute() else path.name
