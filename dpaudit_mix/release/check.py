"""`dpaudit-mix check-release`: everything about a release.json that does not hold, each
finding naming its section (DESIGN §11). The manifest is untrusted input: every field the checks
read is type-checked first, and every section is tied to the claim, the data and the gate's rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .. import accounting
from .. import problem as problem_io
from ..cache import sha256_bytes
from ..data import registry
from ..errors import InputError, require
from ..problem import Problem
from .manifest import manifest_digest
from .spec import MIN_AUDIT_RUNS


def _field(mapping: Any, key: str, kinds: tuple[type, ...], where: str) -> Any:
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


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, OSError, RecursionError) as exc:
        raise InputError(f"{path} is not a release manifest: {exc!r}") from None


def _read_manifest(path: Path) -> tuple[dict[str, Any], accounting.GaussianPhase, str]:
    """The manifest, its phase and its accountant, every field the checks read type-checked first."""
    manifest = _json(path)
    where = f"release manifest {path}"
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


def check_release(manifest_path: str | Path, problem: str | Path | None = None) -> list[str]:
    """Everything about a release.json that does not hold, each naming its section; [] when it
    all does. Not only the digest: every section is tied to the claim, the data and the release
    rules (a forger who recomputes the digest must still make the sections agree with each other
    and with the problem's bytes): the claim recomputed under every accountant; the manifest's
    own verification and audit verdicts; the audit's σ, q, T, C, data digest, canaries and run
    counts against the claim, the spec and the gate's rules; the sources and λ against the problem."""
    manifest_path = Path(manifest_path)
    require(manifest_path.is_file(), f"manifest not found: {manifest_path}")
    manifest = _json(manifest_path)
    if isinstance(manifest, dict) and manifest.get("kind") == "model":
        from .model_check import check_model_release

        require(problem is None, "--problem: a model release names no problem file")
        return check_model_release(manifest, manifest_path.parent, f"release manifest {manifest_path}")
    manifest, phase, accountant = _read_manifest(manifest_path)
    problems = []
    if manifest.get("manifest_sha256") != manifest_digest(manifest):
        problems.append("manifest_sha256 does not match the manifest's contents (edited after release)")
    problems += _claim_mismatch(manifest, phase, accountant)
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
    found, why = _released_problem(inputs["problem"], manifest, manifest_path.parent, problem, inputs["problem_sha256"])
    problems += why
    if found is not None:
        if list(found.sources) != list(sources):
            problems.append(f"sources: the manifest's {sources} are not the problem's {list(found.sources)} (in order)")
        if problem_io.data_sha256(found) != inputs.get("data_sha256"):
            problems.append("inputs: data_sha256 is not the digest of the released problem's data")
    return problems


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
    runs = spec.get("audit_runs")
    if not isinstance(runs, int) or runs < MIN_AUDIT_RUNS or any(r.get("runs") != runs for r in results):
        problems.append(f"audit: a result ran other than the spec's audit_runs {runs!r} (at least {MIN_AUDIT_RUNS})")
    return problems


def _released_problem(
    name: str, manifest: dict[str, Any], folder: Path, problem: str | Path | None, digest: str
) -> tuple[Problem | None, list[str]]:
    """The released-on problem, if its bytes are the ones the manifest names: ``problem`` when
    given, else the embedded problem rebuilt, else the file at the manifest's path (relative to
    the release ``folder``); else None and why."""
    if problem is None and name.startswith(("embedded:", "data:")):
        embedded = name.split(":", 1)[1]
        if name.startswith("data:"):  # a data manifest, relative to the release folder like a file
            embedded = str(folder / embedded)
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
    path = Path(problem) if problem is not None else folder / name
    if not path.is_file():
        return None, [f"inputs: problem file {path} not found (give it with --problem)"]
    content = problem_io.read_bytes(path)
    if sha256_bytes(content) != digest:
        return None, [f"inputs: problem file {path} does not match the released problem's sha256"]
    return problem_io.loads(content, path), []
