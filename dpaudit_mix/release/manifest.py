"""A published release.json, as types: its claim, budget and sections (:class:`Manifest`), the
digest that binds them, and the paths it may name. check-release reads a manifest as untrusted
JSON (:mod:`.check`); the gate writes one through :meth:`Manifest.to_dict`."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..cache import json_sha256


@dataclass(frozen=True)
class Claim:
    """(ε, δ) with the accountant that calibrated σ, ε under every built-in accountant, and the
    mechanism's settings."""

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


class Digested:
    """A manifest whose release.json is its ``body()`` and the digest over it."""

    def body(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def digest(self) -> str:
        return manifest_digest(self.body())

    def to_dict(self) -> dict[str, Any]:
        return {**self.body(), "manifest_sha256": self.digest}


@dataclass(frozen=True)
class Manifest(Digested):
    """release.json: λ over ``sources``, what was claimed and checked, and its own digest.
    ``inputs``, ``spec``, ``verification`` and ``audit`` are the JSON sections check-release reads."""

    weights: tuple[float, ...]
    sources: tuple[str, ...]
    task: str | None
    claim: Claim
    inputs: dict[str, str]
    spec: dict[str, Any]
    verification: dict[str, Any]
    audit: dict[str, Any]
    budget: Budget
    timestamp: str

    def body(self) -> dict[str, Any]:
        """Every section, in release.json's order, without the digest."""
        return {
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
    """sha256 over the canonical JSON of every field but the digest itself."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return json_sha256(body, compact=True).hexdigest()


def public_path(path: Path, out: Path) -> str:
    """A file as a published manifest may name it: relative to the release folder ``out`` when it
    lies under that folder's parent (check-release finds it from there), else by its name alone:
    a machine's absolute paths, and the folders above, are not for publication."""
    relative = Path(os.path.relpath(path.resolve(), out.resolve()))
    return str(relative) if relative.parts[:2].count("..") <= 1 and not relative.is_absolute() else path.name
