"""`dpaudit-mix release`: publish λ only after the exact configuration passes its checks (DESIGN §11).

read the inputs once and hash those bytes → reserve the budget in the ledger (under its lock) →
verify-accountant (quick) → a white-box audit of the exact configuration (same problem bytes,
ρ = 1, same σ, q, T, C, learner) with the profile verdict → only then one fit with noise from the
OS CSPRNG → the card, release.json (with its own sha256), and the reservation committed as the
ledger entry (with that digest). A refusal withdraws the reservation and writes refused.json
and nothing that holds λ.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from .. import __version__, accounting
from .. import problem as problem_io
from ..atomic import check_output, write_bytes, write_json
from ..audit.engine import run_audit
from ..audit.report import summary_verdict, write_report
from ..audit.spec import AuditSpec
from ..cache import json_sha256, sha256_bytes, user_cache_dir
from ..data import registry
from ..errors import EXIT_BAD_INPUT, EXIT_VIOLATION, InputError, require
from ..learner import LearnerConfig, fit
from ..problem import Problem
from ..reporting import save_figure, write_pages
from ..specfile import parse_spec, read_spec_bytes
from ..verify.checks import QUICK
from ..verify.suite import failures, verify
from . import ledger
from .spec import MIN_AUDIT_RUNS, ReleaseSpec

#: the verification level run before every release (tests swap in a smaller one).
VERIFY_LEVEL = QUICK
#: the card a release writes beside release.json (it shows λ).
CARD = ("release.md", "release.html", "lambda.png", "tradeoff.png")


class Refused(Exception):
    """A check failed (exit 3) or the input is bad (exit 2); ``stage`` says where."""

    def __init__(self, stage: str, reason: str, exit_code: int = EXIT_VIOLATION, private: str = "") -> None:
        super().__init__(reason)
        self.stage, self.reason, self.exit_code = stage, reason, exit_code
        self.private = private  # said to the user, never written into the (publishable) folder


@dataclass(frozen=True)
class Published:
    """A published release: its folder and its manifest (release.json, exactly as hashed)."""

    out: Path
    manifest: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """What the command line says of it."""
        claim = self.manifest["claim"]
        return {
            "out": str(self.out),
            "manifest": str(self.out / "release.json"),
            "sources": self.manifest["sources"],
            "weights": self.manifest["weights"],
            "epsilon": claim["epsilon"],
            "delta": claim["delta"],
            "manifest_sha256": self.manifest["manifest_sha256"],
            "spent_epsilon": self.manifest["budget"]["spent_epsilon"],
            "budget_epsilon": self.manifest["budget"]["budget_epsilon"],
        }


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 over the canonical JSON of every field but the digest itself."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return json_sha256(body, compact=True).hexdigest()


def _problem_bytes(spec: ReleaseSpec, out: Path) -> tuple[str, bytes]:
    """The problem released on, as bytes read once, and the public name the manifest gives it:
    ``embedded:NAME`` (rebuilt by check-release) or the file's :func:`public_path`. The problem
    itself never enters the release folder: its rows are the sensitive data."""
    if spec.problem in registry.PROBLEMS:
        return f"embedded:{spec.problem}", problem_io.dumps(registry.build(spec.problem, spec.task))
    path = registry.problem_path(spec.problem)
    return public_path(path, out), problem_io.read_bytes(path)


def public_path(path: Path, out: Path) -> str:
    """A file as a published manifest may name it: relative to the release folder ``out`` when it
    lies under that folder's parent (check-release finds it from there), else by its name alone:
    a machine's absolute paths, and the folders above, are not for publication."""
    relative = Path(os.path.relpath(path.resolve(), out.resolve()))
    return str(relative) if relative.parts[:2].count("..") <= 1 and not relative.is_absolute() else path.name


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


def _card(manifest: dict[str, Any], out: Path) -> None:
    """release.md / release.html: the claim, the audit picture and λ beside the uniform mixture."""
    lam, sources = np.array(manifest["weights"]), manifest["sources"]
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(sources) + 1.2))
    y = np.arange(len(sources))
    ax.barh(y - 0.2, lam, height=0.4, label="released λ")
    ax.barh(y + 0.2, np.full(len(sources), 1 / len(sources)), height=0.4, label="uniform", color="lightgrey")
    ax.set(yticks=y, yticklabels=sources, xlabel="mixture weight")
    ax.invert_yaxis()
    ax.legend()
    claim, audit, budget = manifest["claim"], manifest["audit"], manifest["budget"]
    cap = "no cap" if budget["budget_epsilon"] is None else f"{budget['budget_epsilon']:g}"
    eps = ", ".join(f"{k} {v:.4g}" for k, v in claim["epsilon_by_accountant"].items())
    rows = [["canary", "runs", "strict ε_LB", "GDP ε_LB", "μ_LB", "profile"]]
    rows += [
        [
            r["canary"],
            str(r["runs"]),
            f"{r['epsilon_lower_bound']:.3f}",
            f"{r['epsilon_lower_bound_gdp']:.3f}",
            f"{r['mu_lower_bound']:.3f}",
            "VIOLATED" if r["profile_violation"] else "ok",
        ]
        for r in audit["results"]
    ]
    blocks = [
        (
            "strong",
            f"Released: ({claim['epsilon']:g}, {claim['delta']:g})-DP mixture weights over "
            f"{len(sources)} sources ({'user' if claim['user_level'] else 'example'}-level, add/remove).",
        ),
        (
            "p",
            f"Spent ε = {budget['spent_epsilon']:.4g} of {cap} on this data (every release on it, this one "
            f"included, composed by PLD at δ = {budget['delta']:g}).",
        ),
        (
            "p",
            f"σ = {claim['noise_multiplier']:.5g} calibrated by {claim['accountant']}; q = {claim['sample_rate']:g}, "
            f"T = {claim['steps']}, C = {claim['clip']:g}. ε at δ under every accountant: {eps}. Noise from the OS "
            f"CSPRNG. Problem sha256 {manifest['inputs']['problem_sha256'][:16]}…; released {manifest['timestamp']}.",
        ),
        (
            "p",
            f"verify-accountant ({manifest['verification']['level']}): "
            f"{'PASS' if manifest['verification']['passed'] else 'FAIL'}. White-box audit of this exact "
            f"configuration, {audit['confidence']:.0%} CP, thresholds '{audit['threshold_strategy']}': "
            f"{'VIOLATION' if audit['violation'] else 'no violation'}.",
        ),
        ("table", rows),
        ("figure", out / "tradeoff.png"),
        ("figure", save_figure(fig, out / "lambda.png")),
    ]
    write_pages(out, "dpaudit-mix release", blocks, name="release")


def _release(
    spec_path: Path,
    spec_bytes: bytes,
    spec: ReleaseSpec,
    out: Path,
    ledger_path: Path,
    noise_multiplier: float | None,
    progress: bool,
) -> dict[str, Any]:
    name, content = _problem_bytes(spec, out)
    prob = problem_io.loads(content, Path(name))  # these bytes are hashed, audited, fitted and released
    require(not spec.user_level or prob.users is not None, "user_level = true needs a problem file with 'users'")
    calibrated = accounting.calibrate(spec.epsilon, spec.delta, spec.sample_rate, spec.steps, spec.accountant)
    sigma = calibrated if noise_multiplier is None else noise_multiplier
    require(np.isfinite(sigma) and sigma > 0, f"noise multiplier must be finite and > 0, got {sigma}")
    inputs = {
        "problem": name,
        "problem_sha256": sha256_bytes(content),
        "data_sha256": problem_io.data_sha256(prob),
        "spec": public_path(spec_path, out),
        "spec_sha256": sha256_bytes(spec_bytes),
        "package_version": __version__,
    }
    phase = accounting.GaussianPhase(sigma, spec.sample_rate, spec.steps)
    aliases = (problem_io.exact_data_sha256(prob),)  # what ledgers before the canonical digest keyed by
    try:
        reservation = ledger.reserve(
            ledger_path,
            data_sha256=inputs["data_sha256"],
            problem_sha256=inputs["problem_sha256"],
            epsilon=spec.epsilon,
            delta=spec.delta,
            phase=phase,
            user_level=spec.user_level,
            timestamp=_now(),
            budget=spec.budget_epsilon,
            aliases=aliases,
        )
    except ledger.OverBudget as over:
        raise Refused(
            "budget",
            f"this release would bring the epsilon spent on this data from {over.before:.4g} "
            f"to {over.after:.4g} (PLD, delta {spec.delta:g}), over its budget_epsilon {over.budget:g}",
            private=f"the ledger is {ledger_path}",
        ) from None
    except ledger.Conflict as conflict:
        raise Refused("budget", str(conflict), private=f"the ledger is {ledger_path}") from None
    spent, cap, delta = ledger.standing(ledger_path, inputs["data_sha256"], inputs["problem_sha256"], aliases)
    budget = {"spent_epsilon": spent, "budget_epsilon": cap, "delta": delta}
    try:
        manifest = _checked_release(spec, prob, inputs, phase, calibrated, out, progress, budget)
    except (Refused, InputError):
        ledger.withdraw(ledger_path, reservation)  # refused: nothing published, nothing spent
        raise
    # Only now is λ published; a crash before the commit leaves the reservation counted.
    write_json(out / "release.json", manifest)
    ledger.commit(ledger_path, reservation, manifest["manifest_sha256"])
    return manifest


def _checked_release(
    spec: ReleaseSpec,
    prob: Problem,
    inputs: dict[str, str],
    phase: accounting.GaussianPhase,
    calibrated: float,
    out: Path,
    progress: bool,
    budget: dict[str, Any],
) -> dict[str, Any]:
    """verify-accountant, the audit of this exact configuration, then the one CSPRNG fit: the
    manifest, with its card written (release.json is the caller's, last). ``budget``: what the
    ledger says of the data with this release counted."""
    sigma = phase.noise_multiplier
    verification = verify(VERIFY_LEVEL, progress=progress)
    if failures(verification):
        raise Refused("verify", "verify-accountant failed: " + "; ".join(failures(verification)))
    audit_spec = AuditSpec(
        problem=spec.problem if spec.problem in registry.PROBLEMS else inputs["problem"],
        task=prob.task or spec.task,
        epsilon=spec.epsilon,
        delta=spec.delta,
        rho=1.0,
        steps=spec.steps,
        clip=spec.clip,
        sample_rate=spec.sample_rate,
        learning_rate=spec.learning_rate,
        user_level=spec.user_level,
        canaries=spec.audit_canaries,
        natural_policy=spec.natural_policy,
        threats=("white_box",),
        controls=False,
        runs=spec.audit_runs,
        seed=spec.seed,
        confidence=spec.confidence,
        threshold=spec.threshold,
        chunk_size=spec.chunk_size,
    )
    work = work_folder(inputs)
    outcome = run_audit(audit_spec, work, noise_multiplier=sigma, progress=progress, problem=prob, report=write_report)
    write_bytes(out / "tradeoff.png", (work / "tradeoff.png").read_bytes())  # counts only: publishable
    audit = outcome.summary
    if audit.violation:
        raise Refused(
            "audit",
            f"the audit of this exact configuration found: {summary_verdict(audit)}",
            private=f"its private report is {work / 'report.md'}",
        )
    config = LearnerConfig(
        steps=spec.steps,
        clip=spec.clip,
        noise_multiplier=sigma,
        sample_rate=spec.sample_rate,
        learning_rate=spec.learning_rate,
        user_level=spec.user_level,
        secure=True,
    )
    weights = fit(prob, config, 1).weights[0]
    claim = {
        "epsilon": spec.epsilon,
        "delta": spec.delta,
        "accountant": spec.accountant,
        "epsilon_by_accountant": accounting.epsilons([phase], spec.delta),
        "noise_multiplier": sigma,
        "calibrated_noise_multiplier": calibrated,
        "sample_rate": spec.sample_rate,
        "steps": spec.steps,
        "clip": spec.clip,
        "learning_rate": spec.learning_rate,
        "user_level": spec.user_level,
    }
    manifest: dict[str, Any] = {
        "weights": weights.tolist(),
        "sources": list(prob.sources),
        "task": prob.task,
        "claim": claim,
        "inputs": inputs,
        "spec": _public_spec(spec, inputs["problem"], out),
        "verification": {"level": verification["level"], "passed": True, "seconds": verification["seconds"]},
        "audit": {
            "violation": audit.violation,
            "results": [
                {
                    k: r.to_dict()[k]
                    for k in (
                        "canary",
                        "threat",
                        "runs",
                        "epsilon_lower_bound",
                        "mu_lower_bound",
                        "epsilon_lower_bound_gdp",
                        "profile_violation",
                        "epsilon_violation",
                        "verdict",
                        "epsilon_lower_bound_max",
                    )
                }
                for r in audit.results
            ],
            "confidence": audit.confidence,
            "confidence_per_result": audit.confidence_per_result,
            "threshold_strategy": audit.threshold_strategy,
            "claimed_tradeoff": audit.claimed_tradeoff,
            "noise_multiplier": audit.noise_multiplier,
            "sample_rate": spec.sample_rate,
            "steps": spec.steps,
            "clip": spec.clip,
            "data_sha256": problem_io.data_sha256(prob),
            "problem": audit.problem,
        },
        "budget": budget,
        "timestamp": _now(),
    }
    manifest["manifest_sha256"] = manifest_digest(manifest)
    _card(manifest, out)
    return manifest


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def release(
    spec_path: str | Path,
    out: Path,
    noise_multiplier: float | None = None,
    progress: bool = True,
    ledger_path: Path | None = None,
) -> Published:
    """Run the gate and publish; on refusal write ``out/refused.json`` and raise :class:`Refused`.

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
    try:
        spec_bytes = read_spec_bytes(spec_path)
        spec = parse_spec(ReleaseSpec, spec_path, spec_bytes)
        ledger_path = ledger_path or (Path(spec.ledger) if spec.ledger else ledger.default_path())
        manifest = _release(spec_path, spec_bytes, spec, out, ledger_path, noise_multiplier, progress)
    except (Refused, InputError) as exc:
        refusal = exc if isinstance(exc, Refused) else Refused("input", str(exc), exit_code=EXIT_BAD_INPUT)
        for name in CARD:  # a card of an unpublished release must not outlive this refusal
            (out / name).unlink(missing_ok=True)
        try:
            write_json(
                out / "refused.json",
                {
                    "stage": refusal.stage,
                    "reason": refusal.reason,
                    "exit_code": refusal.exit_code,
                    "spec": public_path(spec_path, out),
                    "timestamp": _now(),
                },
            )
        except OSError as err:  # an unwritable --out: the one line on stderr must do
            print(f"dpaudit-mix: cannot write {out / 'refused.json'}: {err}", file=sys.stderr)
        raise refusal from None
    (out / "refused.json").unlink(missing_ok=True)  # stale now that this run has published
    return Published(out, manifest)


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


def _read_manifest(path: Path) -> tuple[dict[str, Any], accounting.GaussianPhase, str]:
    """The manifest, its phase and its accountant, every field the checks read type-checked first."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, OSError, RecursionError) as exc:
        raise InputError(f"{path} is not a release manifest: {exc!r}") from None
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
    if problem is None and name.startswith("embedded:"):
        embedded = name[len("embedded:") :]
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
