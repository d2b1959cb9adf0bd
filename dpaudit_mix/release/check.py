"""`dpaudit-mix check-release`: everything about a release.json that does not hold, each
finding naming its section (docs/concepts/release.md). The manifest is untrusted input: every field the checks
read is type-checked first, every path it names must lie where a release's may, and every section
is tied to the claim, the data and the gate's rules; :mod:`.publication` checks what every release
carries (digest, signature, files, ledger) and :mod:`.model_check` a model's sections. The gate
runs the same checks on a manifest before it writes it (:func:`check_manifest`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .. import accounting
from .. import problem as problem_io
from ..audit.claim import Claim
from ..base import strict_json
from ..base.cache import sha256_bytes
from ..base.errors import InputError, is_real, require
from ..data import registry
from ..problem import Problem
from .audit_size import power_problems
from .card import CARD
from .model_check import check_model_release
from .publication import Checked, Trust, check_publication, trust
from .publication import field_of as _field
from .spec import MIN_AUDIT_RUNS


def _json(content: bytes, path: Path) -> Any:
    """``content`` as Python's parser reads it (any JSON), else one InputError."""
    try:
        return json.loads(content)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InputError(f"{path} is not a release manifest: {exc!r}") from None


def _read_manifest(manifest: Any, where: str) -> tuple[dict[str, Any], accounting.GaussianPhase, str]:
    """The manifest, its phase and its accountant, every field the checks read type-checked first."""
    claim = _field(manifest, "claim", (dict,), where)
    for key in ("inputs", "audit", "verification"):
        _field(manifest, key, (dict,), where)
    for key in ("weights", "sources"):
        _field(manifest, key, (list,), where)
    _field(manifest["inputs"], "problem_sha256", (str,), f"{where}, inputs")
    _field(manifest["inputs"], "problem", (str,), f"{where}, inputs")
    for key in ("epsilon", "delta", "noise_multiplier", "sample_rate"):
        _field(claim, key, (int, float), f"{where}, claim")
    _field(claim, "steps", (int,), f"{where}, claim")
    _field(claim, "epsilon_by_accountant", (dict,), f"{where}, claim")
    accountant = _field(claim, "accountant", (str,), f"{where}, claim")
    accounting.check_delta(claim["delta"])
    try:
        phase = accounting.GaussianPhase(claim["noise_multiplier"], claim["sample_rate"], claim["steps"])
    except InputError as exc:
        raise InputError(f"{where}, claim: {exc}") from None
    return manifest, phase, accountant


def check_release(
    manifest_path: str | Path,
    problem: str | Path | None = None,
    *,
    public_key: str | Path | None = None,
    ledger_path: str | Path | None = None,
) -> list[str]:
    """Everything about a release.json that does not hold, each naming its section, and a signer
    no key trusted here vouches for; [] when it all does (:func:`inspect_release` also says which
    checks ran, and tells an unknown signer apart from a problem)."""
    found = inspect_release(manifest_path, problem, public_key=public_key, ledger_path=ledger_path)
    return found.problems + (
        ["signature: integrity verified, signer unknown (give public_key)"] if found.signer_unknown else []
    )


def inspect_release(
    manifest_path: str | Path,
    problem: str | Path | None = None,
    *,
    public_key: str | Path | None = None,
    ledger_path: str | Path | None = None,
) -> Checked:
    """check-release of the release.json at ``manifest_path``: what does not hold, which checks
    ran (``checked``: the digest, the signature, the files, the ledger, then each section the
    manifest holds: :data:`LAMBDA_CHECKS` or :data:`MODEL_CHECKS`, the problem's bytes where they
    were at hand), whether its signer is trusted here, and what could not be checked.
    ``public_key``: the releaser's key (default: this machine's, where it has released);
    ``ledger_path``: the ledger to find the release in (default: this machine's)."""
    manifest_path = Path(manifest_path)
    require(manifest_path.is_file(), f"manifest not found: {manifest_path}")
    content = manifest_path.read_bytes()
    try:
        manifest = strict_json.loads(content, f"{manifest_path} (a release manifest)")
    except InputError as exc:
        _json(content, manifest_path)  # not JSON at all: bad input, exit 2
        # JSON that two readers read apart (a key twice: the forged λ first, the signed one last)
        return Checked(problems=[f"release.json: {exc}"], checked=["strict JSON"])
    return check_manifest(manifest, manifest_path.parent, problem, trust(public_key, ledger_path))


def check_manifest(manifest: Any, folder: Path, problem: str | Path | bytes | None, trusted: Trust) -> Checked:
    """Every check of a manifest (as JSON) published in ``folder``: the gate runs it before it
    writes release.json (``problem``: the bytes it read once and released), check-release after
    (``problem``: the file given with --problem, else the one the manifest names)."""
    where = f"release manifest {folder / 'release.json'}"
    if isinstance(manifest, dict) and manifest.get("kind") == "model":
        require(problem is None, "--problem: a model release names no problem file")
        found = check_publication(manifest, folder, MODEL_FILES, trusted)
        found.problems += check_model_release(manifest, folder, where)
        found.checked += MODEL_CHECKS
        return found
    manifest, phase, accountant = _read_manifest(manifest, where)
    found = check_publication(manifest, folder, CARD, trusted)
    problems, read = _lambda_sections(manifest, phase, accountant, folder, problem)
    found.problems += problems
    found.checked += [*LAMBDA_CHECKS, *(["problem (its sha256, sources, data digest and identity)"] if read else [])]
    return found


#: the sections check-release ties to each other and to the claim, beyond the publication's checks.
LAMBDA_CHECKS = [
    "claim (ε recomputed under every accountant, the spec's settings)",
    "verification (its verdict)",
    "audit (its σ, q, T, C, data, canaries and runs against the claim; its verdicts; its power against detect)",
    "weights (a point of the simplex, one per source)",
]
MODEL_CHECKS = [
    "claim (each phase's ε recomputed by its accountant, the total by its composition)",
    "model (the weights file against its sha256)",
    "verification (its verdict)",
    "audit (clean, of the finetune's σ, q and T)",
    "metrics (each against chance and the baselines)",
]


#: what a model release publishes beside release.json (its card has no figures).
MODEL_FILES = ("release.md", "release.html", "card.png", "model.npz")


def _lambda_sections(
    manifest: dict[str, Any],
    phase: accounting.GaussianPhase,
    accountant: str,
    folder: Path,
    problem: str | Path | bytes | None,
) -> tuple[list[str], bool]:
    """Not only the digest: every section is tied to the claim, the data and the release rules (a
    forger who recomputes the digest must still make the sections agree with each other and with
    the problem's bytes): the claim recomputed under every accountant; the manifest's own
    verification and audit verdicts; the audit's σ, q, T, C, data digest, canaries and run counts
    against the claim, the spec and the gate's rules; the sources, λ and the data's identity
    against the problem. Returns the problems and whether the problem's bytes were at hand."""
    problems = _claim_mismatch(manifest, phase, accountant)
    if manifest["verification"].get("passed") is not True:
        problems.append("verification: the manifest's own verification did not pass (verification.passed is not true)")
    problems += _audit_mismatch(manifest)
    weights, sources = manifest["weights"], manifest["sources"]
    numeric = all(isinstance(w, (int, float)) and not isinstance(w, bool) and np.isfinite(w) for w in weights)
    if len(weights) != len(sources) or len(weights) < 2:
        problems.append(f"weights: {len(weights)} weights for {len(sources)} sources (one weight per source, k >= 2)")
    if not numeric or any(w < 0 for w in weights) or abs(sum(weights) - 1) > 1e-6:
        problems.append("weights: the released weights are not a point of the simplex (finite, >= 0, summing to 1)")
    inputs = manifest["inputs"]
    found, why = _released_problem(inputs["problem"], manifest, folder, problem, inputs["problem_sha256"])
    problems += why
    if found is not None:
        if list(found.sources) != list(sources):
            problems.append(f"sources: the manifest's {sources} are not the problem's {list(found.sources)} (in order)")
        if problem_io.data_sha256(found) != inputs.get("data_sha256"):
            problems.append("inputs: data_sha256 is not the digest of the released problem's data")
        key, identity = problem_io.budget_key(found)
        if manifest.get("data") != {"sha256": key, "identity": identity}:
            problems.append(f"data: the ledger key is not the released problem's ({identity} {key[:16]}…)")
    return problems, found is not None


def _spec_section(manifest: dict[str, Any]) -> dict[str, Any]:
    raw = manifest.get("spec")
    return raw if isinstance(raw, dict) else {}


def _claim_mismatch(manifest: dict[str, Any], phase: accounting.GaussianPhase, accountant: str) -> list[str]:
    """The claim's ε recomputed from (σ, q, T) under every accountant, and its settings against
    the spec's (a refused request, such as a σ too small to account, is a finding, not a crash)."""
    claim, problems = manifest["claim"], []
    if accountant not in accounting.ACCOUNTANTS:
        return [f"claim: unknown accountant {accountant!r}; known: {', '.join(accounting.ACCOUNTANTS.names())}"]
    recorded, delta, epsilon = claim["epsilon_by_accountant"], claim["delta"], claim["epsilon"]
    for name in accounting.BUILTIN_ACCOUNTANTS:
        try:
            eps = accounting.epsilon([phase], delta, name)
        except InputError as exc:
            problems.append(f"claim: epsilon under {name} cannot be recomputed from (sigma, q, T): {exc}")
            continue
        if not isinstance(recorded.get(name), (int, float)) or not np.isclose(
            eps, recorded[name], rtol=1e-6, atol=1e-9
        ):
            problems.append(
                f"claim: epsilon under {name}: recomputed {eps:.6g} from (sigma, q, T), "
                f"manifest says {recorded.get(name)}"
            )
        if name == accountant and eps > epsilon * (1 + 1e-9):
            problems.append(
                f"claim: the claimed epsilon {epsilon:g} is below what {name} gives for (sigma, q, T): {eps:.6g}"
            )
    spec = _spec_section(manifest)
    for key in ("epsilon", "delta", "steps", "clip", "sample_rate", "user_level", "accountant"):
        if key in spec and spec[key] != claim.get(key):
            problems.append(f"claim: {key} {claim.get(key)!r} is not the spec's {spec[key]!r}")
    return problems


def _audit_mismatch(manifest: dict[str, Any]) -> list[str]:
    """The audit section against the claim, the spec and the gate's rules: a clean white-box audit
    of this σ, q, T and C on this data, one result per canary the spec names, each of the spec's
    run count (never fewer than the gate's minimum)."""
    audit, claim, inputs = manifest["audit"], manifest["claim"], manifest["inputs"]
    spec = _spec_section(manifest)
    results = audit.get("results")
    if (
        audit.get("violation") is not False
        or not isinstance(results, list)
        or not results
        or any(not isinstance(r, dict) or r.get("profile_violation") is not False for r in results)
    ):
        return ["audit: the manifest's own audit does not show a clean pass (a violation, or no results)"]
    problems = []
    for key in ("noise_multiplier", "sample_rate", "steps", "clip"):
        if audit.get(key) != claim.get(key):
            problems.append(f"audit: it ran {key} {audit.get(key)!r}, the claim says {claim.get(key)!r}")
    if audit.get("data_sha256") != inputs.get("data_sha256"):
        problems.append("audit: it ran on other data (its data_sha256 is not the release's)")
    canaries = sorted(str(r.get("canary")) for r in results)
    if canaries != sorted(spec.get("audit_canaries", ())) or any(r.get("threat") != "white_box" for r in results):
        problems.append(f"audit: its results {canaries} are not one white-box result per canary of the spec")
    runs, given = audit.get("runs"), spec.get("audit_runs")
    if (
        not isinstance(runs, int)
        or isinstance(runs, bool)
        or runs < MIN_AUDIT_RUNS
        or given not in (None, runs)
        or any(r.get("runs") != runs for r in results)
    ):
        return [
            *problems,
            f"audit: a result ran other than the audit's {runs!r} runs (the spec's audit_runs, when "
            f"it gives them; at least {MIN_AUDIT_RUNS})",
        ]
    confidence, strategy = audit.get("confidence_per_result"), audit.get("threshold_strategy")
    sigma = claim.get("calibrated_noise_multiplier")
    if not (is_real(confidence) and 0 < confidence < 1 and isinstance(strategy, str) and is_real(sigma)):
        return [
            *problems,
            "audit: its per-result confidence, threshold strategy or the claim's calibrated sigma is unreadable",
        ]
    try:
        claimed = accounting.GaussianPhase(sigma, claim["sample_rate"], claim["steps"])
    except InputError as exc:
        return [*problems, f"audit: the claim's calibrated phase is not one: {exc}"]
    return problems + power_problems(
        audit,
        Claim(claim["epsilon"], claim["delta"], (claimed,), accountant=claim["accountant"]),
        size=runs,
        one_run=False,
        confidence=confidence,
        threshold=strategy,
    )


def _released_problem(
    name: str, manifest: dict[str, Any], folder: Path, problem: str | Path | bytes | None, digest: str
) -> tuple[Problem | None, list[str]]:
    """The released-on problem, if its bytes are the ones the manifest names: ``problem`` when
    given, else the embedded problem rebuilt, else the file at the manifest's path (relative to
    the release ``folder``); else None and why."""
    if problem is None and name.startswith(("embedded:", "data:")):
        embedded = name.split(":", 1)[1]
        if name.startswith("data:"):  # a data manifest, relative to the release folder like a file
            named = _named_path(folder, embedded)
            if named is None:
                return None, [f"inputs: the data manifest {embedded!r} lies outside the release folder's parent"]
            embedded = str(named)
            if not Path(embedded).is_file():
                return None, [f"inputs: data manifest {embedded} not found (give the problem file with --problem)"]
        require(embedded in registry.PROBLEMS, f"the manifest names an unknown embedded problem {embedded!r}")
        spec = manifest.get("spec")
        task = spec.get("task") if isinstance(spec, dict) else None
        if not isinstance(task, str):
            return None, ["inputs: the manifest's spec has no task to rebuild its embedded problem with"]
        content = problem_io.dumps(registry.build(embedded, task))
        if sha256_bytes(content) != digest:
            return None, [f"inputs: the embedded problem {embedded} / {task} rebuilt here does not match its sha256"]
        return problem_io.loads(content, Path(name)), []
    if isinstance(problem, bytes):  # the gate's own bytes, read once
        if sha256_bytes(problem) != digest:
            return None, ["inputs: the problem released is not the one the manifest's sha256 names"]
        return problem_io.loads(problem, Path(name)), []
    if problem is None:
        named = _named_path(folder, name)
        if named is None:
            return None, [
                f"inputs: the problem file {name!r} lies outside the release folder's parent (give --problem)"
            ]
    path = Path(problem) if problem is not None else folder / name
    if not path.is_file():
        return None, [f"inputs: problem file {path} not found (give it with --problem)"]
    content = problem_io.read_bytes(path)
    if sha256_bytes(content) != digest:
        return None, [f"inputs: problem file {path} does not match the released problem's sha256"]
    return problem_io.loads(content, path), []


def _named_path(folder: Path, name: str) -> Path | None:
    """A path a manifest names, relative to its release folder: only where the gate's
    :func:`.manifest.public_path` puts one (under the folder's parent), never an absolute path or
    one that climbs out, so a forged manifest cannot make check-release read any file on the machine."""
    if not name or Path(name).is_absolute():
        return None
    path = folder / name
    return path if path.resolve().is_relative_to(folder.resolve().parent) else None
