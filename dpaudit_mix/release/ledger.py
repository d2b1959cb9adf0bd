"""The privacy-budget ledger: every release per problem file, composed in the PLD accountant.

Releasing twice on the same data spends budget twice (sequential composition), so the ledger
keys releases by the problem file's sha256 and composes all of their phases at the new
release's δ before the next one may go out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import accounting
from ..atomic import write_json
from ..errors import InputError


def read(path: Path) -> list[dict[str, Any]]:
    """The ledger's entries ([] when there is no ledger yet)."""
    if not path.is_file():
        return []
    try:
        entries = json.loads(path.read_text())["releases"]
        assert isinstance(entries, list)
        return entries
    except (ValueError, KeyError, TypeError, AssertionError, UnicodeDecodeError):
        raise InputError(f"the privacy ledger {path} is not a valid ledger file; refusing to guess what was spent")


def _phase(entry: dict[str, Any]) -> accounting.GaussianPhase:
    return accounting.GaussianPhase(entry["noise_multiplier"], entry["sample_rate"], entry["steps"])


def spent(entries: list[dict[str, Any]], problem_sha256: str, delta: float,
          extra: tuple[accounting.GaussianPhase, ...] = ()) -> float:
    """ε at ``delta`` of every release on this problem, plus ``extra`` phases, composed in PLD."""
    phases = [_phase(e) for e in entries if e["problem_sha256"] == problem_sha256] + list(extra)
    return accounting.epsilon(phases, delta, "pld") if phases else 0.0


def append(path: Path, entry: dict[str, Any]) -> None:
    write_json(path, {"releases": [*read(path), entry]})
