"""What check-release checks of every release.json, λ or model: that it is what was published.

The digest (an accidental edit), the signature (a deliberate one: :mod:`.signing`), the files it
publishes beside itself (the card a person reads, its figures, the weights: each listed with its
sha256, each inside the release folder), and — where the ledger that released it is at hand —
that the ledger committed this very manifest, with the budget the manifest states. Each check
that ran is named in ``checked``; each that could not run says why in ``notes``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..base.cache import sha256_bytes
from ..base.errors import InputError, require
from ..base.identity import is_digest
from . import ledger, signing
from .ledger_store import Location
from .manifest import manifest_digest

#: the folder's ownership record (:mod:`..owned`), the one file beside release.json it does not list.
OWNED = ".release.owned"


def field_of(mapping: Any, key: str, kinds: tuple[type, ...], where: str) -> Any:
    """``mapping[key]`` if it is one of ``kinds`` (bool is never a number), else an InputError."""
    require(isinstance(mapping, dict), f"{where} is not an object")
    value = mapping.get(key)
    is_bool = isinstance(value, bool)
    require(
        isinstance(value, kinds)
        and (bool in kinds or not is_bool)
        and not (isinstance(value, float) and not np.isfinite(value)),
        f"{where}: '{key}' must be {' or '.join(k.__name__ for k in kinds)}, got {value!r}",
    )
    return value


@dataclass
class Checked:
    """Every finding (``problems``: empty when it all holds), which checks ran, what was not
    checked, and whether the signer is one trusted here (``signer_unknown``: the signature holds
    under the key the manifest names, which anyone who re-signs it can name)."""

    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    signer_unknown: bool = False

    @property
    def ok(self) -> bool:
        """Nothing fails and the signer is trusted: only then is the release what its releaser published."""
        return not self.problems and not self.signer_unknown

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "signer": "unknown" if self.signer_unknown else "trusted",
            "checked": self.checked,
            "problems": self.problems,
            "notes": self.notes,
        }


@dataclass(frozen=True)
class Trust:
    """What a check trusts: the signer's public key (None: only the key the manifest names), and
    the ledger to find the release in (``reservation``: the gate's own, before it commits)."""

    key: Ed25519PublicKey | None
    key_source: str  # "--public-key FILE" or "this machine's key"
    ledger_path: Location | None
    ledger_given: bool = False
    reservation: str = ""


def trust(public_key: str | Path | None, ledger_path: str | Path | None) -> Trust:
    """What check-release trusts: ``--public-key`` if given, else this machine's own key (if it
    has released); ``--ledger`` if given, else the machine's ledger."""
    if public_key is not None:
        return Trust(
            signing.read_public_key(Path(public_key)), f"--public-key {public_key}", _ledger(ledger_path), True
        )
    return Trust(signing.local_public_key(), "this machine's key", _ledger(ledger_path), ledger_path is not None)


def _ledger(given: str | Path | None) -> Location:
    return ledger.location(given)


def inside(folder: Path, name: str) -> Path | None:
    """``folder/name`` if ``name`` is a plain file name that resolves to a regular file inside
    ``folder`` (no separator, no link out), else None."""
    if not name or Path(name).name != name or name in (".", ".."):
        return None
    path = folder / name
    if path.is_symlink() or not path.is_file() or path.resolve().parent != folder.resolve():
        return None
    return path


def check_files(manifest: dict[str, Any], folder: Path, required: tuple[str, ...]) -> list[str]:
    """Every file the manifest lists lies beside it and has its sha256; the card and figures it
    must publish are listed."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and is_digest(v) for k, v in files.items()):
        return ["files: the manifest does not list the files it publishes (name -> sha256)"]
    problems = [
        f"files: {name} is not listed (the card and its figures are signed with the manifest)"
        for name in required
        if name not in files
    ]
    beside = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    problems += [
        f"files: {name} lies in the release folder but the manifest does not list it (a release folder holds "
        "only what it publishes)"
        for name in beside
        if name not in files and name not in ("release.json", OWNED)
    ]
    for name, digest in files.items():
        path = inside(folder, name)
        if path is None or name == "release.json":
            problems.append(
                f"files: {name!r} is not a file beside release.json (a listed file lies in the release folder)"
            )
        elif sha256_bytes(path.read_bytes()) != digest:
            problems.append(f"files: {name} does not match its sha256 (changed, or copied from another release)")
    return problems


def check_publication(manifest: dict[str, Any], folder: Path, required: tuple[str, ...], trusted: Trust) -> Checked:
    """The digest, the signature, the listed files and the ledger's record of ``manifest``."""
    found = Checked()
    digest = manifest_digest(manifest)
    found.checked.append("digest")
    if manifest.get("manifest_sha256") != digest:
        found.problems.append("manifest_sha256 does not match the manifest's contents (edited after release)")
    verdict = signing.verify(manifest, trusted.key)
    if verdict.problem:
        found.problems.append(verdict.problem)
    if verdict.trusted:
        found.checked.append("signature")
    elif not verdict.problem:
        found.checked.append("signature (the key it names)")
        found.signer_unknown = True
        found.notes.append(
            f"integrity verified, signer unknown: the signature holds under the key the manifest names "
            f"({verdict.fingerprint}), which anyone who re-signs it can name; pass --public-key FILE (the releaser's "
            "`dpaudit-mix signing-key`)"
        )
    found.checked.append("files")
    found.problems += check_files(manifest, folder, required)
    _check_ledger(manifest, digest, trusted, found)
    return found


def _check_ledger(manifest: dict[str, Any], digest: str, trusted: Trust, found: Checked) -> None:
    """Where the ledger knows this data: its chain still holds the reservation the manifest was
    charged on (the row and sha256 it records), and it committed this very digest (or, before the
    commit, it is the gate's own reservation), with the budget the manifest states."""
    where = trusted.ledger_path
    data = manifest.get("data")
    key = data.get("sha256") if isinstance(data, dict) else None
    if where is None or not isinstance(key, str):
        found.notes.append("no ledger to check the release against")
        return
    try:
        now = ledger.state(where)
    except InputError:
        if trusted.ledger_given:
            raise
        found.notes.append(f"the ledger {where.shown} cannot be read: the release was not checked against it")
        return
    mine = [e for e in now.entries if e.data_sha256 == key]
    if key not in now.datasets and not mine:
        found.notes.append(
            f"the ledger {where.shown} records nothing on this data (released on another ledger?): not checked"
        )
        return
    found.checked.append("ledger")
    charged = manifest.get("ledger")
    if isinstance(charged, dict):
        _check_charged_on(charged, where, found)
    if trusted.reservation:
        entry = [e for e in mine if e.id == trusted.reservation]
    else:
        entry = [e for e in mine if e.status == "released" and e.manifest_sha256 == digest]
    if not entry:
        found.problems.append(
            f"ledger: {where.shown} records releases on this data, but none committed this manifest (its digest "
            f"{digest[:16]}…): it is not the release that was published"
        )
        return
    budget = manifest.get("budget")
    recorded = entry[0]
    if recorded.spent_epsilon is None:
        return  # an entry of an earlier layout records no budget to compare with
    stated = (budget.get("spent_epsilon"), budget.get("budget_epsilon")) if isinstance(budget, dict) else (None, None)
    same = (
        isinstance(stated[0], (int, float))
        and math.isclose(stated[0], recorded.spent_epsilon, rel_tol=1e-9)
        and stated[1] == recorded.budget_epsilon
    )
    if not same:
        found.problems.append(
            f"budget: the manifest states spent {stated[0]!r} of {stated[1]!r}; the ledger recorded "
            f"{recorded.spent_epsilon:.6g} of {recorded.budget_epsilon!r} for this release"
        )


def _check_charged_on(charged: dict[str, Any], where: Location, found: Checked) -> None:
    """The chain still holds, unbroken up to it, the reservation row the manifest records."""
    head = charged.get("head")
    row = head.get("row") if isinstance(head, dict) else None
    if not (isinstance(row, int) and isinstance(head, dict) and isinstance(head.get("sha256"), str)):
        found.problems.append("ledger: the manifest's ledger head is not a row and a sha256")
        return
    _, broken = ledger.verify_chain(where, spends=False)  # links and signatures: `ledger verify` does all
    if broken is not None and broken.seq <= row:
        found.problems.append(f"ledger: the chain breaks before this release's row, at {broken.line()}")
        return
    if ledger.row_sha256(where, row) != head["sha256"]:
        found.problems.append(
            f"ledger: {where.shown} no longer holds the history this release was charged on (row {row} is not the "
            "one its manifest records)"
        )
    found.checked.append("ledger chain")
