"""`dpaudit-mix release`: publish λ only after the exact configuration passes its checks (DESIGN §11).

validate and hash the inputs → ledger budget → verify-accountant (quick) → a white-box audit of
the exact configuration (same problem, ρ = 1, same σ, q, T, C, learner) with the profile verdict
→ only then one fit with noise from the OS CSPRNG → the ledger entry, then release.json (with
its own sha256) and a one-page card. A refusal writes refused.json and nothing that holds λ.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from .. import accounting, problem as problem_io
from ..atomic import check_output, write_json
from ..cache import sha256
from ..audit.engine import AuditSpec, run_audit
from ..audit.report import write_report
from ..data import registry
from ..errors import InputError, require
from ..learner import LearnerConfig, fit
from ..reporting import save_figure, write_pages
from ..verify.checks import QUICK
from ..verify.suite import failures, verify
from . import ledger
from .spec import ReleaseSpec, load_release_spec

#: the verification level run before every release (tests swap in a smaller one).
VERIFY_LEVEL = QUICK
#: what a release writes in its folder that may hold λ, cleared before anything else runs.
OUTPUTS = ("release.json", "release.md", "release.html", "lambda.png", "refused.json")
EXIT_REFUSED = 3


class Refused(Exception):
    """A check failed (exit 3) or the input is bad (exit 2); ``stage`` says where."""

    def __init__(self, stage: str, reason: str, exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(reason)
        self.stage, self.reason, self.exit_code = stage, reason, exit_code


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 over the canonical JSON of every field but the digest itself."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _problem_file(spec: ReleaseSpec, out: Path) -> Path:
    """The problem file released on: the spec's path, or the embedded problem saved in ``out``."""
    if spec.problem in registry.PROBLEMS:
        path = out / "problem.npz"
        problem_io.save(registry.build(spec.problem, spec.task), path)
        return path
    path = Path(spec.problem)
    require(path.is_file(), f"problem {spec.problem!r} is neither an embedded problem "
            f"({', '.join(registry.PROBLEMS)}) nor an existing file")
    return path


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
    claim, audit = manifest["claim"], manifest["audit"]
    eps = ", ".join(f"{k} {v:.4g}" for k, v in claim["epsilon_by_accountant"].items())
    rows = [["canary", "runs", "strict ε_LB", "GDP ε_LB", "μ_LB", "profile"]]
    rows += [[r["canary"], str(r["runs"]), f"{r['epsilon_lower_bound']:.3f}", f"{r['epsilon_lower_bound_gdp']:.3f}",
              f"{r['mu_lower_bound']:.3f}", "VIOLATED" if r["profile_violation"] else "ok"] for r in audit["results"]]
    blocks = [
        ("strong", f"Released: ({claim['epsilon']:g}, {claim['delta']:g})-DP mixture weights over "
                   f"{len(sources)} sources ({'user' if claim['user_level'] else 'example'}-level, add/remove)."),
        ("p", f"σ = {claim['noise_multiplier']:.5g} calibrated by {claim['accountant']}; q = {claim['sample_rate']:g}, "
              f"T = {claim['steps']}, C = {claim['clip']:g}. ε at δ under every accountant: {eps}. Noise from the OS "
              f"CSPRNG. Problem sha256 {manifest['inputs']['problem_sha256'][:16]}…; released {manifest['timestamp']}."),
        ("p", f"verify-accountant ({manifest['verification']['level']}): "
              f"{'PASS' if manifest['verification']['passed'] else 'FAIL'}. White-box audit of this exact "
              f"configuration, {audit['confidence']:.0%} CP, thresholds '{audit['threshold_strategy']}': "
              f"{'VIOLATION' if audit['violation'] else 'no violation'}."),
        ("table", rows),
        ("figure", out / "audit" / "tradeoff.png"),
        ("figure", save_figure(fig, out / "lambda.png")),
    ]
    write_pages(out, "dpaudit-mix release", blocks, name="release")


def _release(spec_path: Path, out: Path, noise_multiplier: float | None, progress: bool) -> dict[str, Any]:
    spec = load_release_spec(spec_path)
    path = _problem_file(spec, out)
    prob = problem_io.load(path)
    require(not spec.user_level or prob.users is not None, "user_level = true needs a problem file with 'users'")
    calibrated = accounting.calibrate(spec.epsilon, spec.delta, spec.sample_rate, spec.steps, spec.accountant)
    sigma = calibrated if noise_multiplier is None else noise_multiplier
    require(np.isfinite(sigma) and sigma > 0, f"noise multiplier must be finite and > 0, got {sigma}")
    inputs = {"problem_path": str(path.resolve()), "problem_sha256": sha256(path),
              "spec_path": str(spec_path.resolve()), "spec_sha256": sha256(spec_path),
              "package_version": version("dpaudit-mix")}
    ledger_path = Path(spec.ledger) if spec.ledger else out.resolve().parent / "ledger.json"
    phase = accounting.GaussianPhase(sigma, spec.sample_rate, spec.steps)
    entries = ledger.read(ledger_path)
    total = ledger.spent(entries, inputs["problem_sha256"], spec.delta, (phase,))
    if spec.budget_epsilon is not None and total > spec.budget_epsilon:
        before = ledger.spent(entries, inputs["problem_sha256"], spec.delta)
        raise Refused("budget", f"this release would bring the epsilon spent on this problem file from {before:.4g} "
                      f"to {total:.4g} (PLD, delta {spec.delta:g}), over budget_epsilon {spec.budget_epsilon:g} "
                      f"(ledger {ledger_path})")
    verification = verify(VERIFY_LEVEL, progress=progress)
    if failures(verification):
        raise Refused("verify", "verify-accountant failed: " + "; ".join(failures(verification)))
    audit_spec = AuditSpec(problem=str(path), task=prob.task or spec.task, epsilon=spec.epsilon, delta=spec.delta,
                           rho=1.0, steps=spec.steps, clip=spec.clip, sample_rate=spec.sample_rate,
                           learning_rate=spec.learning_rate, user_level=spec.user_level,
                           canaries=spec.audit_canaries, natural_policy=spec.natural_policy,
                           threats=("white_box",), controls=False, runs=spec.audit_runs, seed=spec.seed,
                           confidence=spec.confidence, threshold=spec.threshold, chunk_size=spec.chunk_size)
    outcome = run_audit(audit_spec, out / "audit", noise_multiplier=sigma, progress=progress)
    write_report(outcome, out / "audit")
    audit = outcome.summary
    if audit["violation"]:
        worst = max(audit["results"], key=lambda r: r["mu_lower_bound"])
        raise Refused("audit", f"the audit of this exact configuration found a VIOLATION of the claimed epsilon "
                      f"{spec.epsilon:g} ({worst['canary']} canary: mu_LB {worst['mu_lower_bound']:.3f}, GDP eps_LB "
                      f"{worst['epsilon_lower_bound_gdp']:.3f}); see {out / 'audit' / 'report.md'}")
    config = LearnerConfig(steps=spec.steps, clip=spec.clip, noise_multiplier=sigma, sample_rate=spec.sample_rate,
                           learning_rate=spec.learning_rate, user_level=spec.user_level, secure=True)
    weights = fit(prob, config, 1).weights[0]
    claim = {"epsilon": spec.epsilon, "delta": spec.delta, "accountant": spec.accountant,
             "epsilon_by_accountant": accounting.epsilons([phase], spec.delta), "noise_multiplier": sigma,
             "calibrated_noise_multiplier": calibrated, "sample_rate": spec.sample_rate, "steps": spec.steps,
             "clip": spec.clip, "learning_rate": spec.learning_rate, "user_level": spec.user_level}
    manifest: dict[str, Any] = {
        "weights": weights.tolist(), "sources": list(prob.sources), "task": prob.task, "claim": claim,
        "inputs": inputs, "spec": asdict(spec),
        "verification": {"level": verification["level"], "passed": True, "seconds": verification["seconds"]},
        "audit": {key: audit[key] for key in ("violation", "results", "confidence", "threshold_strategy",
                                              "claimed_tradeoff", "noise_multiplier")},
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    manifest["audit"]["results"] = [{k: r[k] for k in ("canary", "threat", "runs", "epsilon_lower_bound",
                                                       "mu_lower_bound", "epsilon_lower_bound_gdp",
                                                       "profile_violation")} for r in audit["results"]]
    manifest["manifest_sha256"] = manifest_digest(manifest)
    # The ledger first: a crash between the two over-counts the budget, never under-counts it.
    ledger.append(ledger_path, {"problem_sha256": inputs["problem_sha256"], "epsilon": spec.epsilon,
                                "delta": spec.delta, "noise_multiplier": sigma, "sample_rate": spec.sample_rate,
                                "steps": spec.steps, "user_level": spec.user_level,
                                "timestamp": manifest["timestamp"], "manifest": str((out / "release.json").resolve())})
    write_json(out / "release.json", manifest)
    _card(manifest, out)
    return manifest


def release(spec_path: str | Path, out: Path, noise_multiplier: float | None = None,
            progress: bool = True) -> dict[str, Any]:
    """Run the gate; on refusal write ``out/refused.json`` and raise :class:`Refused`."""
    spec_path = Path(spec_path)
    check_output(out, folder=True)
    for name in OUTPUTS:
        (out / name).unlink(missing_ok=True)
    try:
        return _release(spec_path, out, noise_multiplier, progress)
    except (Refused, InputError) as exc:
        refusal = exc if isinstance(exc, Refused) else Refused("input", str(exc), exit_code=2)
        try:
            write_json(out / "refused.json", {"stage": refusal.stage, "reason": refusal.reason,
                                              "exit_code": refusal.exit_code, "spec": str(spec_path),
                                              "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        except OSError as err:  # an unwritable --out: the one line on stderr must do
            print(f"dpaudit-mix: cannot write {out / 'refused.json'}: {err}", file=sys.stderr)
        raise refusal from None


def check_release(manifest_path: str | Path, problem: str | Path | None = None) -> list[str]:
    """Everything about a release.json that does not match; [] when it all holds."""
    manifest_path = Path(manifest_path)
    require(manifest_path.is_file(), f"manifest not found: {manifest_path}")
    try:
        manifest = json.loads(manifest_path.read_text())
        claim, inputs = manifest["claim"], manifest["inputs"]
        phase = accounting.GaussianPhase(claim["noise_multiplier"], claim["sample_rate"], claim["steps"])
        recorded = claim["epsilon_by_accountant"]
        delta, epsilon, accountant = claim["delta"], claim["epsilon"], claim["accountant"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise InputError(f"{manifest_path} is not a release manifest: {exc!r}") from None
    problems = []
    if manifest.get("manifest_sha256") != manifest_digest(manifest):
        problems.append("manifest_sha256 does not match the manifest's contents (edited after release)")
    for name in accounting.ACCOUNTANTS:
        eps = accounting.epsilon([phase], delta, name)
        if name not in recorded or not np.isclose(eps, recorded[name], rtol=1e-6, atol=1e-9):
            problems.append(f"epsilon under {name}: recomputed {eps:.6g} from (sigma, q, T), manifest says "
                            f"{recorded.get(name)}")
        if name == accountant and eps > epsilon * (1 + 1e-9):
            problems.append(f"the claimed epsilon {epsilon:g} is below what {name} gives for (sigma, q, T): {eps:.6g}")
    path = Path(problem) if problem is not None else Path(inputs["problem_path"])
    if not path.is_file():
        problems.append(f"problem file {path} not found")
    elif sha256(path) != inputs["problem_sha256"]:
        problems.append(f"problem file {path} does not match the released problem's sha256")
    return problems
