"""The λ release kind: DP-MixMin's mixture weights, released through the gate's protocol
(:mod:`.gate`; docs/concepts/release.md).

Prepared before anything is spent: the problem's bytes read once and hashed, σ calibrated for
the claim (a smaller σ is refused) and the calibrating accountant checked against PLD
(:mod:`.accountant_check`), the white-box audit of the exact configuration sized to its detect
and its spec checked. The work, once the budget is reserved: verify-accountant (quick) while the
audit's runs fill its chunks alongside → that audit (same problem bytes, ρ = 1, same σ, q, T, C,
learner) with the profile verdict → only then one fit with noise from the OS CSPRNG → the card
and the manifest (signed and checked by the protocol).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .. import accounting
from .. import problem as problem_io
from ..audit.claim import Claim
from ..audit.many_run.engine import run_audit
from ..audit.many_run.report import summary_verdict, write_report
from ..audit.mechanisms import mechanism
from ..audit.spec import AuditSpec, mixing_data
from ..audit.verdict import result_confidence
from ..base.atomic import write_bytes
from ..base.cache import sha256_bytes, user_cache_dir
from ..base.errors import require
from ..base.resources import alongside
from ..base.specfile import parse_spec
from ..base.version import __version__
from ..data import registry
from ..data.manifest import is_manifest
from ..learner import fit
from ..problem import Problem
from ..verification.parts import ACCOUNTANT, LEARNER, WIRING
from . import signing
from .accountant_check import check_release_accountant
from .audit_size import AuditSize, audit_size
from .card import CARD, write_card
from .kinds import Asked, Charge, Prepared, Work, now, released_sigma, verification_record
from .lambda_audit import audit_record, audit_spec
from .manifest import LambdaClaim, Manifest, public_path
from .provenance import verified
from .refused import Refused
from .spec import MIN_AUDIT_RUNS, ReleaseSpec

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


def _public_spec(spec: ReleaseSpec, problem: str) -> dict[str, Any]:
    """The spec as the manifest publishes it: its problem as :func:`public_path` gives it (the
    spec's exact bytes are bound by ``inputs.spec_sha256``)."""
    return {**asdict(spec), "problem": problem}


def work_folder(inputs: dict[str, str]) -> Path:
    """Where the release's audit keeps its runs' scores, chunks and report: private (they are
    thousands of seeded runs on the sensitive data), outside the release folder, in the user
    cache, keyed by the problem and spec digests so that a rerun resumes its chunks."""
    return user_cache_dir() / "release-audits" / f"{inputs['problem_sha256'][:16]}-{inputs['spec_sha256'][:16]}"


def _budget_key(spec: ReleaseSpec, prob: Problem, trusted: dict[str, Any]) -> tuple[str, str]:
    """The ledger key of the data a release spends, and what it hashes. A problem built here (an
    embedded one, a data manifest's) knows its identity; a problem file's is believed only under
    a trusted signature over its rows (:mod:`.provenance`); else the spec must say
    ``identity = "rows"`` to key it by its rows."""
    key, identity = problem_io.budget_key(prob)
    if spec.problem in registry.PROBLEMS or is_manifest(spec.problem) or spec.identity == "rows":
        return (key, identity) if spec.identity != "rows" else (problem_io.data_sha256(prob), "rows")
    why = verified(prob, trusted)
    require(
        not why,
        f"{spec.problem}: {why}, so no budget can be kept for its data: make it with `dpaudit-mix problem` "
        '(which signs the identity of the data it is made from), or set identity = "rows" in the spec to key it '
        "by its rows alone (the card says so)",
    )
    return key, identity


def _largest_user(prob: Problem) -> int:
    """The most rows one user holds (the unit a user-level release protects)."""
    import numpy as np

    assert prob.users is not None
    return int(np.unique(prob.users, return_counts=True)[1].max())


def budget_aliases(prob: Problem, key: str) -> tuple[str, ...]:
    """The keys earlier ledger layouts gave this problem's data (its rows' digest, v3; the exact
    one, v2): what the ledger migrates to ``key``."""
    return tuple(
        dict.fromkeys(a for a in (problem_io.data_sha256(prob), problem_io.exact_data_sha256(prob)) if a != key)
    )


def _checked_release(fixed: _Fixed, work: Work) -> Manifest:
    """verify-accountant, the audit of this exact configuration, then the one CSPRNG fit: the
    manifest, with its card written (release.json is the protocol's, last)."""
    spec, prob, inputs, audited, phase = fixed.spec, fixed.problem, fixed.inputs, fixed.audited, fixed.phase
    out, progress = work.out, work.progress
    sigma = phase.noise_multiplier
    private = work_folder(inputs)
    # The audit's runs go alongside the verification (its accountant calls leave cores idle): a
    # child fills the work folder's chunks, and the same audit below resumes from them once the
    # verification has passed. A refusal kills the child; nothing it wrote is published.
    audit_run = partial(run_audit, audited, private, noise_multiplier=sigma, problem=prob)
    with alongside(audit_run, progress=False):
        verification = work.verified()
    outcome = audit_run(progress=progress, report=write_report)
    write_bytes(out / "tradeoff.png", (private / "tradeoff.png").read_bytes())  # counts only: publishable
    audit = outcome.summary
    if audit.violation:
        raise Refused(
            "audit",
            f"the audit of this exact configuration found: {summary_verdict(audit)}",
            private=f"its private report is {private / 'report.md'}",
        )
    config = spec.learner(sigma, secure=True)
    weights = fit(prob, config, 1).weights[0]
    manifest = Manifest(
        weights=tuple(float(w) for w in weights),
        sources=tuple(prob.sources),
        task=prob.task,
        claim=_claim(spec, phase, fixed.calibrated),
        inputs=inputs,
        spec=_public_spec(spec, inputs["problem"]),
        verification={**verification_record(verification), "accountant_check": fixed.accountant_check},
        audit=audit_record(audit, spec, prob, fixed.sized),
        budget=work.budget,
        timestamp=now(),
        publication=work.publication,
    )
    write_card(manifest.to_dict(), out, signing.signer())
    return manifest


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


@dataclass(frozen=True)
class _Fixed:
    """What the λ work needs, fixed before the reservation."""

    spec: ReleaseSpec
    problem: Problem
    inputs: dict[str, str]
    audited: AuditSpec
    phase: accounting.GaussianPhase
    calibrated: float
    accountant_check: dict[str, Any]
    sized: AuditSize


class LambdaKind:
    """λ: a release spec without a pipeline (:class:`~.spec.ReleaseSpec`)."""

    files: tuple[str, ...] = CARD
    parts: frozenset[str] = LAMBDA_PARTS

    def prepare(self, asked: Asked) -> Prepared:
        spec_path, spec_bytes, out = asked.spec_path, asked.spec_bytes, asked.out
        spec = parse_spec(ReleaseSpec, spec_path, spec_bytes)
        name, content = _problem_bytes(spec, out)
        prob = problem_io.loads(content, Path(name))  # these bytes are hashed, audited, fitted and released
        require(not spec.user_level or prob.users is not None, "user_level = true needs a problem file with 'users'")
        calibrated = accounting.calibrate(spec.epsilon, spec.delta, spec.sample_rate, spec.steps, spec.accountant)
        sigma = released_sigma(calibrated, asked.noise_multiplier)
        phase = accounting.GaussianPhase(sigma, spec.sample_rate, spec.steps)
        checked_accountant = check_release_accountant(spec.accountant, spec.epsilon, spec.delta, [phase])
        audited_claim = Claim(  # the audit's: at the calibrated σ
            spec.epsilon,
            spec.delta,
            (accounting.GaussianPhase(calibrated, spec.sample_rate, spec.steps),),
            accountant=spec.accountant,
        )
        sized = audit_size(  # the audit this release runs, held to its detect before anything is spent
            audited_claim,
            detect=spec.detect,
            size=spec.audit_runs,
            one_run=False,
            confidence=result_confidence(spec.confidence, len(spec.audit_canaries)),
            minimum=MIN_AUDIT_RUNS,
            threshold=spec.threshold,
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
        key, identity = _budget_key(spec, prob, asked.trusted)
        charge = Charge(
            data_sha256=key,
            problem_sha256=inputs["problem_sha256"],
            epsilon=spec.epsilon,
            delta=spec.delta,
            phase=phase,
            user_level=spec.user_level,
            budget=spec.budget_epsilon,
            kind="lambda",
            identity=identity,
            aliases=budget_aliases(prob, key),
            max_rows_per_user=_largest_user(prob) if spec.user_level else 0,
        )
        fixed = _Fixed(spec, prob, inputs, audited, phase, calibrated, checked_accountant, sized)
        return Prepared(charge, {"sha256": key, "identity": identity}, content, fixed)

    def work(self, prepared: Prepared, work: Work) -> Manifest:
        return _checked_release(prepared.state, work)
