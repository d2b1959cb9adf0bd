"""`dpaudit-mix release`: the one protocol every release runs, whatever it releases (docs/concepts/release.md).

A release *kind* (:mod:`.kinds`: λ built in, :mod:`.lambda_kind`; a model, from the pipeline
layer) supplies what differs: its claim, its audit's size, its work and its files. The protocol
is the same for each: the kind prepares (the spec's bytes read once and hashed, σ calibrated for
the claim, the calibrating accountant checked against PLD, the audit sized: every input error
before anything is spent) → the budget reserved in the ledger (under its lock; keyed by the
sensitive data's identity) → the kind's work, verify-accountant first → the manifest listed,
signed and put through every check of check-release → release.json, and the reservation
committed with that digest. The kind's files (the card, its figures, the weights) are made in a
staging folder beside ``--out`` and moved in whole once signed and checked, as they go out with
their signed manifest or not at all. One cleanup path for every kind: on any failure the staging
folder is removed;
a refusal withdraws the reservation and writes refused.json; a crash leaves it counted (the
private work may have run). Only this module reserves, commits and withdraws.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..base.atomic import check_output, write_json
from ..base.errors import EXIT_BAD_INPUT, InputError, require
from ..base.owned import claimed
from ..base.specfile import read_spec_bytes
from ..verification.checks import QUICK
from ..verification.suite import Verification, verify
from . import ledger, signing
from .card import CARD
from .check import MODEL_FILES, check_manifest
from .kinds import RELEASE_KINDS, Asked, Prepared, ReleaseKind, Work, now, register_release_kind, spec_kind
from .lambda_kind import LambdaKind
from .ledger_store import Location
from .manifest import Budget, Digested, Publication, public_path, published_files
from .publication import OWNED, Trust
from .published import Published
from .refused import Refused

#: the verification level run before every release (tests swap in a smaller one).
VERIFY_LEVEL = QUICK

register_release_kind("lambda", LambdaKind())  # built in, through the call a user's kind makes


def _local_key() -> dict[str, Any]:
    """This machine's signing key, by fingerprint (what it signed, it trusts)."""
    public = signing.signing_key().public_key()
    return {signing.fingerprint(public): public}


def _verified(kind: ReleaseKind, progress: bool) -> Verification:
    """verify-accountant of what ``kind`` runs, at :data:`VERIFY_LEVEL`; a failure refuses."""
    verification = verify(VERIFY_LEVEL, progress=progress, parts=kind.parts)
    if verification.failures():
        raise Refused("verify", "verify-accountant failed: " + "; ".join(verification.failures()))
    return verification


def _released(
    kind: ReleaseKind,
    spec_path: Path,
    spec_bytes: bytes,
    *,
    out: Path,
    where: Location,
    noise_multiplier: float | None,
    progress: bool,
) -> Digested:
    """The protocol (the module's order) for one ``kind``: its manifest, published."""
    trusted = {**ledger.state(where).trusted, **_local_key()}
    prepared: Prepared = kind.prepare(Asked(spec_path, spec_bytes, out, noise_multiplier, progress, trusted))
    reservation = reserve(where, **prepared.charge.request(), timestamp=now(), out=str(out.resolve()))
    staging = _staging(out)
    try:
        charged = ledger.charged_on(where, reservation)
        publication = Publication(
            reservation, dict(prepared.data), ledger={"url": where.public, "head": charged.to_dict()}
        )
        budget = reserved_budget(where, reservation)
        work = Work(staging, progress, budget, publication, lambda: _verified(kind, progress))
        manifest = signed_and_checked(
            kind.work(prepared, work),
            staging,
            files=kind.files,
            where=where,
            reservation=reservation,
            problem=prepared.problem,
        )
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)  # the card and the weights go out with their manifest, or not at all
        if isinstance(exc, (Refused, InputError)):  # refused: nothing published, nothing spent
            stage = exc.stage if isinstance(exc, Refused) else "input"
            ledger.withdraw(where, reservation, f"refused at its {stage} stage: nothing was published")
        else:  # a fault: the private work may have run, so the reservation stays counted
            exc.add_note(
                f"reservation {reservation} stays counted on the ledger; nothing was published: "
                f"`dpaudit-mix ledger withdraw {reservation} --why TEXT` clears it"
            )
        raise
    # Only now is the release published; a crash before the commit leaves the reservation counted,
    # and the next release into this folder (or `dpaudit-mix ledger recover`) commits it.
    _moved_in(staging, out)
    write_json(out / "release.json", manifest.to_dict())
    try:
        ledger.commit(where, reservation, manifest.digest, manifest.budget.spent_epsilon)
    except BaseException as exc:
        exc.add_note(
            f"the release is published ({out / 'release.json'}) but its commit was lost: "
            f"`dpaudit-mix ledger recover {out}` commits it (its reservation {reservation} counts until then)"
        )
        raise
    return manifest


#: the hidden folder beside ``--out`` a release's files are made in: ``.<out's name>`` + this + a random tail.
STAGING = ".staging-"


def _staging(out: Path) -> Path:
    """A fresh folder beside ``out`` for the kind's files: the card and its figures (λ among them)
    are made there and moved into ``out`` only once signed and checked, so a kill mid-card leaves
    nothing in the release folder. Folders an earlier, killed run left beside ``out`` go first
    (``out`` is claimed by this process, so none of them is another run's)."""
    for stale in out.resolve().parent.glob(f".{out.name}{STAGING}*"):
        shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}{STAGING}", dir=out.resolve().parent))


def _moved_in(staging: Path, out: Path) -> None:
    """Every file made in ``staging`` renamed into ``out`` (one file system: each rename is atomic),
    then ``staging`` removed; release.json, written after, is what makes them a publication."""
    made = {p.name: p for p in staging.iterdir()}
    for name in {*CARD, *MODEL_FILES, OWNED} - set(made):  # an unfinished earlier run's, of the other kind
        (out / name).unlink(missing_ok=True)
    for name, path in made.items():
        os.replace(path, out / name)
    staging.rmdir()


def _stale_only(out: Path) -> None:
    """``out`` may hold only what a release of either kind writes (an unfinished earlier run's
    card, replaced by this run's outcome): a release folder is published whole, so any other file
    would be published unlisted (one InputError, before anything is charged)."""
    ours = {*CARD, *MODEL_FILES, OWNED, "refused.json"}
    others = sorted(p.name for p in out.iterdir() if p.name not in ours) if out.is_dir() else []
    require(
        not others,
        f"--out {out} holds {', '.join(others[:3])}{' …' if len(others) > 3 else ''}, which a release does not "
        "write: a release folder is published whole, so choose an empty --out",
    )


def reserved_budget(where: Location, reservation: str) -> Budget:
    """What the ledger says of the data with this reservation counted (the manifest says it):
    recorded by the reservation where the data has a cap, else composed now."""
    entry = ledger.entry(where, reservation)
    if entry.spent_epsilon is not None:
        return Budget(entry.spent_epsilon, entry.budget_epsilon, entry.delta)
    spent, cap, delta = ledger.standing(where, entry.data_sha256, entry.problem_sha256)
    return Budget(spent, cap, delta)


def signed_and_checked(
    manifest: Any,
    out: Path,
    *,
    files: tuple[str, ...],
    where: Location,
    reservation: str,
    problem: bytes | None = None,
) -> Any:
    """``manifest`` with the files it publishes listed and its signature, after every check of
    check-release passed on it (else :class:`Refused`, stage ``check``): the gate never publishes
    what check-release would reject."""
    listed = replace(manifest, publication=replace(manifest.publication, files=published_files(out, files)))
    signed = replace(listed, publication=replace(listed.publication, signature=signing.sign(listed.to_dict())))
    trusted = Trust(signing.local_public_key(), "this machine's key", where, True, reservation)
    found = check_manifest(signed.to_dict(), out, problem, trusted)
    if found.problems:
        raise Refused("check", "the manifest fails check-release: " + "; ".join(found.problems))
    return signed


def reserve(where: Location, **request: Any) -> str:
    """:func:`.ledger.reserve` with its refusals as a release's: over budget, or a cap or δ that
    is not the data's, is :class:`Refused` at the budget stage (nothing written)."""
    try:
        return ledger.reserve(where, **request)
    except ledger.OverBudget as over:
        raise Refused(
            "budget",
            f"this release would bring the epsilon spent on this data from {over.before:.4g} "
            f"to {over.after:.4g} (PLD, delta {request['delta']:g}), over its budget_epsilon {over.budget:g}",
            private=f"the ledger is {where.shown}",
        ) from None
    except ledger.Conflict as conflict:
        raise Refused("budget", str(conflict), private=f"the ledger is {where.shown}") from None
    except ledger.BrokenChain as broken:  # a history changed by hand: no budget to check against
        raise Refused("budget", str(broken)) from None


def check_published_folder(out: Path, where: Location) -> None:
    """``out`` is published whole: never the folder that holds the signing key or the ledger (the
    user state folder by default), nor one that holds a file of their names (one InputError)."""
    for private in (signing.key_path(), *(() if where.path is None else (where.path,))):
        require(
            out.resolve() != private.parent.resolve() and not (out / private.name).exists(),
            f"--out {out} is the folder of {private} (or holds a file of its name): a release folder is "
            "published whole; choose another --out",
        )


def _published_already(out: Path, where: Location) -> None:
    """A folder that holds a release.json is never released into again; where the ledger still
    holds that release's reservation open (its commit was lost to a crash), it is committed now."""
    if not (out / "release.json").exists():
        return
    note = ""
    try:
        recovered = ledger.recover(where, out)
        note = f" (its lost commit was recovered: reservation {recovered} is committed now)"
    except InputError:
        pass  # committed already, or not this ledger's: nothing to recover here
    raise InputError(
        f"{out} already holds a published release (release.json){note}; a release is never overwritten: "
        "choose another --out"
    )


def release(
    spec_path: str | Path,
    out: Path,
    *,
    noise_multiplier: float | None = None,
    progress: bool = True,
    ledger_path: str | Path | None = None,
) -> Published:
    """Run the gate and publish; on refusal write ``out/refused.json`` and raise :class:`Refused`.
    A spec that names a pipeline releases a model (the ``model`` kind), any other λ.

    A folder that already holds a published release is refused up front (a release is never
    overwritten); what an unfinished earlier run left (a card without release.json, a refusal)
    is replaced only by this run's own outcome. ``ledger_path``: the ledger (a path or a URL;
    default ``$DPAUDIT_MIX_LEDGER``, else the user state folder's), never a spec's.
    """
    spec_path = Path(spec_path)
    where = ledger.location(ledger_path)
    require(not out.is_symlink(), f"--out {out} is a symbolic link; a release folder is written only where it is named")
    check_output(out, folder=True)
    if out.exists():
        _published_already(out, where)
    check_published_folder(out, where)
    _stale_only(out)
    unimported = ledger.unimported_json(where)
    require(
        unimported is None,
        f"the machine's earlier JSON ledger {unimported} is not in the ledger {where.shown}: import it once "
        f"(`dpaudit-mix ledger import {unimported}`), so its releases keep counting",
    )
    try:
        with claimed(out):  # two releases into one --out: the second is refused
            (out / "refused.json").unlink(missing_ok=True)  # an earlier refusal's: this run writes its own
            signing.signing_key()  # a key others can read, or a corrupt one, refuses before any work
            spec_bytes = read_spec_bytes(spec_path)
            kind = RELEASE_KINDS.get(spec_kind(spec_path, spec_bytes))
            manifest = _released(
                kind,
                spec_path,
                spec_bytes,
                out=out,
                where=where,
                noise_multiplier=noise_multiplier,
                progress=progress,
            )
    except (Refused, InputError) as exc:
        refusal = exc if isinstance(exc, Refused) else Refused("input", str(exc), exit_code=EXIT_BAD_INPUT)
        for name in {*CARD, *MODEL_FILES, OWNED}:  # nor what an unfinished earlier run of either kind left
            (out / name).unlink(missing_ok=True)
        try:
            write_json(
                out / "refused.json",
                {
                    "stage": refusal.stage,
                    "reason": refusal.reason,
                    "exit_code": refusal.exit_code,
                    "spec": public_path(spec_path, out),
                    "timestamp": now(),
                },
            )
        except OSError as err:  # an unwritable --out: the one line on stderr must do
            print(f"dpaudit-mix: cannot write {out / 'refused.json'}: {err}", file=sys.stderr)
        raise refusal from None
    (out / "refused.json").unlink(missing_ok=True)  # stale now that this run has published
    return Published(out, manifest)
