"""`dpaudit-mix release`: publish λ only after the exact configuration passes its checks (DESIGN §11).

read the inputs once and hash those bytes → σ calibrated for the claim (a smaller σ is refused)
and the calibrating accountant checked against PLD (:mod:`.accountant_check`) → reserve the
budget in the ledger (under its lock; keyed by the sensitive data's identity) → verify-accountant
(quick) → a white-box audit of the exact configuration (same problem bytes, ρ = 1, same σ, q, T,
C, learner) with the profile verdict → only then one fit with noise from the OS CSPRNG → the
card, the manifest (its own sha256, the files it publishes, signed: :mod:`.signing`) → every
check of check-release on it → release.json, and the reservation committed as the ledger entry
(with that digest). A refusal withdraws the reservation and writes refused.json and nothing that
holds λ.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from .. import accounting
from .. import problem as problem_io
from ..atomic import check_output, write_bytes, write_json
from ..audit.engine import run_audit
from ..audit.mechanisms import mechanism
from ..audit.report import summary_verdict, write_report
from ..audit.spec import AuditSpec, mixing_data
from ..audit.verdict import result_confidence
from ..cache import sha256_bytes, user_cache_dir
from ..data import registry
from ..data.manifest import is_manifest
from ..errors import EXIT_BAD_INPUT, InputError, require
from ..learner import fit
from ..problem import Problem
from ..resources import alongside
from ..specfile import parse_spec, read_spec_bytes
from ..verification.checks import QUICK
from ..verification.suite import Verification, verify
from ..verification.variants import ACCOUNTANT, LEARNER, WIRING
from ..version import __version__
from . import ledger, signing
from .accountant_check import check_release_accountant
from .audit_size import AuditSize, audit_size
from .card import CARD, write_card
from .check import MODEL_FILES, check_manifest
from .lambda_audit import audit_record, audit_spec
from .manifest import Budget, LambdaClaim, Manifest, Publication, public_path, published_files
from .model_manifest import ModelManifest, is_model_spec
from .publication import Trust
from .published import Published
from .refused import Refused
from .spec import MIN_AUDIT_RUNS, ReleaseSpec

#: what releases a model from a model release spec's bytes (the image pipeline's, given by the
#: command line: the pipeline is a layer above this gate): (spec path, its bytes, out, ledger
#: path, σ override, progress) → the published manifest.
ModelReleaser = Callable[[Path, bytes, Path, "Path | None", "float | None", bool], ModelManifest]

#: the verification level run before every release (tests swap in a smaller one).
VERIFY_LEVEL = QUICK
#: what releasing λ runs, so what its verification checks: the accountants, the σ they are
#: told (the wiring) and the learner's DP step; not the pipeline's DP-SGD.
LAMBDA_PARTS = frozenset({ACCOUNTANT, WIRING, LEARNER})


def _problem_bytes(spec: ReleaseSpec, out: Path) -> tuple[str, bytes]:
    """The problem released on, as bytes read once, and the public name the manifest gives it:
    ``embedded:NAME`` or ``data:MANIFEST`` (both rebuilt by check-release; a manifest's path as
    :func:`public_path` gives it) or the file's :func:`public_path`. The problem
    itself never enters the release folder: its rows are the sensitive data."""
    if is_manifest(spec.problem):  # a user's data manifest: named as a file is, rebuilt by check-release
        built = problem_io.dumps(registry.build(spec.problem, spec.task))
        return f"data:{public_path(Path(spec.problem), out)}", built
    if spec.problem in registry.PROBLEMS:
        return f"embedded:{spec.problem}", problem_io.dumps(registry.build(spec.problem, spec.task))
    path = registry.problem_path(spec.problem)
    return public_path(path, out), problem_io.read_bytes(path)


def _public_spec(spec: ReleaseSpec, problem: str, out: Path) -> dict[str, Any]:
    """The spec as the manifest publishes it: its paths as :func:`public_path` gives them (the
    spec's exact bytes are bound by ``inputs.spec_sha256``)."""
    ledger_name = public_path(Path(spec.ledger), out) if spec.ledger else ""
    return {**asdict(spec), "problem": problem, "ledger": ledger_name}


def work_folder(inputs: dict[str, str]) -> Path:
    """Where the release's audit keeps its runs' scores, chunks and report: private (they are
    thousands of seeded runs on the sensitive data), outside the release folder, in the user
    cache, keyed by the problem and spec digests so that a rerun resumes its chunks."""
    return user_cache_dir() / "release-audits" / f"{inputs['problem_sha256'][:16]}-{inputs['spec_sha256'][:16]}"


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


def budget_aliases(prob: Problem, key: str) -> tuple[str, ...]:
    """The keys earlier ledger layouts gave this problem's data (its rows' digest, v3; the exact
    one, v2): what the ledger migrates to ``key``."""
    return tuple(
        dict.fromkeys(a for a in (problem_io.data_sha256(prob), problem_io.exact_data_sha256(prob)) if a != key)
    )


def _release(
    spec_path: Path,
    spec_bytes: bytes,
    spec: ReleaseSpec,
    *,
    out: Path,
    ledger_path: Path,
    noise_multiplier: float | None,
    progress: bool,
) -> Manifest:
    name, content = _problem_bytes(spec, out)
    prob = problem_io.loads(content, Path(name))  # these bytes are hashed, audited, fitted and released
    require(not spec.user_level or prob.users is not None, "user_level = true needs a problem file with 'users'")
    calibrated = accounting.calibrate(spec.epsilon, spec.delta, spec.sample_rate, spec.steps, spec.accountant)
    sigma = released_sigma(calibrated, noise_multiplier)
    phase = accounting.GaussianPhase(sigma, spec.sample_rate, spec.steps)
    checked_accountant = check_release_accountant(spec.accountant, spec.epsilon, spec.delta, [phase])
    sized = audit_size(  # the audit this release runs, held to its detect before anything is spent
        spec.epsilon,
        spec.delta,
        [accounting.GaussianPhase(calibrated, spec.sample_rate, spec.steps)],  # the audit's claim
        detect=spec.detect,
        size=spec.audit_runs,
        one_run=False,
        confidence=result_confidence(spec.confidence, len(spec.audit_canaries)),
        minimum=MIN_AUDIT_RUNS,
        threshold=spec.threshold,
        accountant=spec.accountant,
    )
    inputs = {
        "problem": name,
        "problem_sha256": sha256_bytes(content),
        "data_sha256": problem_io.data_sha256(prob),
        "spec": public_path(spec_path, out),
        "spec_sha256": sha256_bytes(spec_bytes),
        "package_version": __version__,
    }
    audited = audit_spec(spec, prob, inputs, sized.size)  # its keys and input checks, before the ledger
    mechanism(audited.mechanism).plan(audited, prob, mixing_data(prob, audited), sigma)
    key, identity = problem_io.budget_key(prob)
    reservation = reserve(
        ledger_path,
        data_sha256=key,
        problem_sha256=inputs["problem_sha256"],
        epsilon=spec.epsilon,
        delta=spec.delta,
        phase=phase,
        user_level=spec.user_level,
        timestamp=now(),
        budget=spec.budget_epsilon,
        aliases=budget_aliases(prob, key),
        kind="lambda",
        identity=identity,
    )
    try:
        publication = Publication(reservation, {"sha256": key, "identity": identity})
        manifest = _checked_release(
            spec,
            prob,
            inputs,
            audited,
            phase=phase,
            calibrated=calibrated,
            out=out,
            progress=progress,
            budget=reserved_budget(ledger_path, reservation),
            publication=publication,
            accountant_check=checked_accountant,
            sized=sized,
        )
        manifest = signed_and_checked(
            manifest, out, files=CARD, ledger_path=ledger_path, reservation=reservation, problem=content
        )
    except (Refused, InputError):
        ledger.withdraw(ledger_path, reservation)  # refused: nothing published, nothing spent
        raise
    # Only now is λ published; a crash before the commit leaves the reservation counted.
    write_json(out / "release.json", manifest.to_dict())
    ledger.commit(ledger_path, reservation, manifest.digest, manifest.budget.spent_epsilon)
    return manifest


def reserved_budget(ledger_path: Path, reservation: str) -> Budget:
    """What the ledger says of the data with this reservation counted (the manifest says it):
    recorded by the reservation under the lock where the data has a cap, else composed now."""
    entry = ledger.entry(ledger_path, reservation)
    if entry.spent_epsilon is not None:
        return Budget(entry.spent_epsilon, entry.budget_epsilon, entry.delta)
    spent, cap, delta = ledger.standing(ledger_path, entry.data_sha256, entry.problem_sha256)
    return Budget(spent, cap, delta)


def signed_and_checked(
    manifest: Any,
    out: Path,
    *,
    files: tuple[str, ...],
    ledger_path: Path,
    reservation: str,
    problem: bytes | None = None,
) -> Any:
    """``manifest`` with the files it publishes listed and its signature, after every check of
    check-release passed on it (else :class:`Refused`, stage ``check``): the gate never publishes
    what check-release would reject."""
    listed = replace(manifest, publication=replace(manifest.publication, files=published_files(out, files)))
    signed = replace(listed, publication=replace(listed.publication, signature=signing.sign(listed.to_dict())))
    trusted = Trust(signing.local_public_key(), "this machine's key", ledger_path, True, reservation)
    found = check_manifest(signed.to_dict(), out, problem, trusted)
    if found.problems:
        raise Refused("check", "the manifest fails check-release: " + "; ".join(found.problems))
    return signed


def reserve(ledger_path: Path, **request: Any) -> str:
    """:func:`.ledger.reserve` with its refusals as a release's: over budget, or a cap or δ that
    is not the data's, is :class:`Refused` at the budget stage (nothing written)."""
    try:
        return ledger.reserve(ledger_path, **request)
    except ledger.OverBudget as over:
        raise Refused(
            "budget",
            f"this release would bring the epsilon spent on this data from {over.before:.4g} "
            f"to {over.after:.4g} (PLD, delta {request['delta']:g}), over its budget_epsilon {over.budget:g}",
            private=f"the ledger is {ledger_path}",
        ) from None
    except ledger.Conflict as conflict:
        raise Refused("budget", str(conflict), private=f"the ledger is {ledger_path}") from None


def _checked_release(
    spec: ReleaseSpec,
    prob: Problem,
    inputs: dict[str, str],
    audited: AuditSpec,
    *,
    phase: accounting.GaussianPhase,
    calibrated: float,
    out: Path,
    progress: bool,
    budget: Budget,
    publication: Publication,
    accountant_check: dict[str, Any],
    sized: AuditSize,
) -> Manifest:
    """verify-accountant, the audit of this exact configuration, then the one CSPRNG fit: the
    manifest, with its card written (release.json is the caller's, last). ``budget``: what the
    ledger says of the data with this release counted."""
    sigma = phase.noise_multiplier
    work = work_folder(inputs)
    # The audit's runs go alongside the verification (its accountant calls leave cores idle): a
    # child fills the work folder's chunks, and the same audit below resumes from them once the
    # verification has passed. A refusal kills the child; nothing it wrote is published.
    audit_run = partial(run_audit, audited, work, noise_multiplier=sigma, problem=prob)
    with alongside(audit_run, progress=False):
        verification = verify(VERIFY_LEVEL, progress=progress, parts=LAMBDA_PARTS)
        if verification.failures():
            raise Refused("verify", "verify-accountant failed: " + "; ".join(verification.failures()))
    outcome = audit_run(progress=progress, report=write_report)
    write_bytes(out / "tradeoff.png", (work / "tradeoff.png").read_bytes())  # counts only: publishable
    audit = outcome.summary
    if audit.violation:
        raise Refused(
            "audit",
            f"the audit of this exact configuration found: {summary_verdict(audit)}",
            private=f"its private report is {work / 'report.md'}",
        )
    config = spec.learner(sigma, secure=True)
    weights = fit(prob, config, 1).weights[0]
    manifest = Manifest(
        weights=tuple(float(w) for w in weights),
        sources=tuple(prob.sources),
        task=prob.task,
        claim=_claim(spec, phase, calibrated),
        inputs=inputs,
        spec=_public_spec(spec, inputs["problem"], out),
        verification={**verification_record(verification), "accountant_check": accountant_check},
        audit=audit_record(audit, spec, prob, sized),
        budget=budget,
        timestamp=now(),
        publication=publication,
    )
    write_card(manifest.to_dict(), out, signing.signer())
    return manifest


def verification_record(verification: Verification) -> dict[str, Any]:
    """The manifest's verification section: the level, the checks that ran, and that they passed."""
    return {
        "level": verification.level,
        "passed": verification.passed,
        "checks": [c.name for c in verification.checks],
        "seconds": verification.seconds,
    }


def _claim(spec: ReleaseSpec, phase: accounting.GaussianPhase, calibrated: float) -> LambdaClaim:
    """The manifest's claim: ε at δ with the accountant that calibrated σ, ε under every built-in."""
    return LambdaClaim(
        epsilon=spec.epsilon,
        delta=spec.delta,
        accountant=spec.accountant,
        epsilon_by_accountant=accounting.epsilons([phase], spec.delta),
        noise_multiplier=phase.noise_multiplier,
        calibrated_noise_multiplier=calibrated,
        sample_rate=spec.sample_rate,
        steps=spec.steps,
        clip=spec.clip,
        learning_rate=spec.learning_rate,
        user_level=spec.user_level,
    )


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def check_published_folder(out: Path, ledger_path: Path | None) -> None:
    """``out`` is published whole: never the folder that holds the signing key or a ledger (the
    user state folder by default), nor one that holds a file of their names (one InputError)."""
    for private in (signing.key_path(), ledger.default_path(), *(() if ledger_path is None else (ledger_path,))):
        require(
            out.resolve() != private.parent.resolve() and not (out / private.name).exists(),
            f"--out {out} is the folder of {private} (or holds a file of its name): a release folder is "
            "published whole; choose another --out",
        )


def release(
    spec_path: str | Path,
    out: Path,
    *,
    noise_multiplier: float | None = None,
    progress: bool = True,
    ledger_path: Path | None = None,
    models: ModelReleaser | None = None,
) -> Published:
    """Run the gate and publish; on refusal write ``out/refused.json`` and raise :class:`Refused`.
    A spec that names a pipeline releases a model, through ``models``.

    A folder that already holds a published release is refused up front (a release is never
    overwritten); what an unfinished earlier run left (a card without release.json, a refusal)
    is replaced only by this run's own outcome. ``ledger_path`` overrides the spec's ``ledger``
    (and the default :func:`.ledger.default_path`).
    """
    spec_path = Path(spec_path)
    check_output(out, folder=True)
    require(
        not (out / "release.json").exists(),
        f"{out} already holds a published release (release.json); a release is never overwritten: choose another --out",
    )
    check_published_folder(out, ledger_path)
    manifest: Manifest | ModelManifest
    try:
        signing.signing_key()  # a key others can read, or a corrupt one, refuses before any work
        spec_bytes = read_spec_bytes(spec_path)
        if is_model_spec(spec_path, spec_bytes):
            require(
                models is not None, f"{spec_path} releases a model (it names a pipeline): use `dpaudit-mix release`"
            )
            assert models is not None
            manifest = models(spec_path, spec_bytes, out, ledger_path, noise_multiplier, progress)
        else:
            spec = parse_spec(ReleaseSpec, spec_path, spec_bytes)
            ledger_path = ledger_path or (Path(spec.ledger) if spec.ledger else ledger.default_path())
            check_published_folder(out, ledger_path)
            manifest = _release(
                spec_path,
                spec_bytes,
                spec,
                out=out,
                ledger_path=ledger_path,
                noise_multiplier=noise_multiplier,
                progress=progress,
            )
    except (Refused, InputError) as exc:
        refusal = exc if isinstance(exc, Refused) else Refused("input", str(exc), exit_code=EXIT_BAD_INPUT)
        for name in {*CARD, *MODEL_FILES}:  # an unpublished release's card or weights must not outlive it
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
