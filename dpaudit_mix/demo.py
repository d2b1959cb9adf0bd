"""`make demo`: the default problem, λ★ vs DP-MixMin λ, the default audit in reports/demo/, then
the default release through the gate in reports/demo/release/."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import numpy as np

from . import accounting
from .audit.many_run.engine import run_audit
from .audit.many_run.report import write_report
from .audit.many_run.result import SettingResult
from .audit.spec import load_spec
from .base.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_VIOLATION
from .base.randomness import stream
from .data import registry
from .learner import LearnerConfig, fit, fit_losses
from .optimum import mixmin
from .problem import save
from .recovery.metrics import cos_similarity
from .release.gate import Refused, release
from .release.ledger_history import forget
from .release.ledger_store import location
from .release.manifest import Manifest

OUT = Path("reports/demo")
EPSILONS = (1.0, 5.0)
RUNS = 200
DELTA = 1e-5
SPEC = Path("audits/default.toml")
RELEASE_SPEC = Path("releases/default.toml")


def _power(result: SettingResult, epsilon: float) -> str:
    """What a private row could have shown: an exactly-claimed mechanism's ε_LB at this size, and
    the leak it catches (a control's row needs none)."""
    power = result.power if result.noise else None
    if power is None:
        return ""
    caught = "no leak up to σ/10" if power.detects is None else f"catches σ/{power.detects:g}"
    return f"  (a tight ε = {epsilon:g} mechanism: {power.tight_lower_bound:.2f} at {result.runs} runs; {caught})"


def _verdict(result: SettingResult) -> str:
    """A private result should stay on or above the claimed curve; a σ = 0 control should not."""
    if result.noise:
        return "profile VIOLATED" if result.profile_violation else "profile ok"
    return "control sees the leak" if result.exceeds_claim else "control sees NOTHING"


def main() -> int:
    start = time.perf_counter()
    prob = registry.build("mnist", registry.DEFAULT_TASK)
    save(prob, OUT / "problem.npz")
    star = mixmin(prob.logp)
    columns = {"λ★": star.weights}
    losses = {"λ★": f"{star.loss:.4f}"}
    for eps in EPSILONS:
        sigma = accounting.calibrate(eps, DELTA, 1.0, 100)
        runs = fit(prob, LearnerConfig(noise_multiplier=sigma), RUNS, stream(0, "learner-noise", demo=eps)).weights
        columns[f"ε={eps:g}"] = runs.mean(axis=0)
        losses[f"ε={eps:g}"] = f"{fit_losses(prob, runs).mean():.4f}"
    print(
        f"problem mnist/{prob.task}: n={prob.n}, k={prob.k}; DP columns are means over {RUNS} runs "
        f"(δ={DELTA:g}, T=100, C=3, full batch)"
    )
    print(f"{'source':<18}" + "".join(f"{name:>10}" for name in columns))
    for i, source in enumerate(prob.sources):
        print(f"{source:<18}" + "".join(f"{col[i]:>10.3f}" for col in columns.values()))
    print(f"{'loss L(λ)':<18}" + "".join(f"{losses[name]:>10}" for name in columns))
    print(
        f"cos(λ★, uniform) = {cos_similarity(star.weights, np.ones(prob.k)):.3f}; problem file: {OUT / 'problem.npz'}"
    )
    outcome = run_audit(load_spec(SPEC), OUT)
    write_report(outcome, OUT)
    summary = outcome.summary
    print(
        f"\naudit {SPEC}: claimed ε = {summary.claimed_epsilon:g}, δ = {summary.delta:g}, "
        f"{summary.results[0].runs} runs per setting"
    )
    for r in summary.results:
        print(
            f"  {r.canary:<9} {r.threat:<10} {'private' if r.noise else 'σ=0 control':<12} "
            f"ε_LB = {r.epsilon_lower_bound:.3f}  GDP ε_LB = {r.epsilon_lower_bound_gdp:.3f}  "
            f"{_verdict(r)}{_power(r, summary.claimed_epsilon)}"
        )
    print(f"violation: {summary.violation}; inconclusive: {summary.inconclusive}; report: {OUT / 'report.html'}")
    # A demonstration, not a real release: its own release folder and ledger, made afresh on every
    # run (a real release is never overwritten, and its ledger is the machine's).
    shutil.rmtree(OUT / "release", ignore_errors=True)
    for name in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"):
        (OUT / name).unlink(missing_ok=True)
    forget(location(OUT / "ledger.sqlite"))  # deleted on purpose: not a history rewritten
    try:
        manifest = release(RELEASE_SPEC, OUT / "release", ledger_path=OUT / "ledger.sqlite").manifest
    except Refused as refusal:
        print(f"\nrelease {RELEASE_SPEC}: REFUSED ({refusal.stage}): {refusal.reason}")
        return refusal.exit_code
    assert isinstance(manifest, Manifest)  # RELEASE_SPEC releases λ
    print(
        f"\nrelease {RELEASE_SPEC}: verified, audited ({manifest.audit['results'][0]['runs']} white-box runs per "
        f"canary, no violation), released λ = {np.round(manifest.weights, 3).tolist()}; manifest "
        f"{OUT / 'release' / 'release.json'}, card {OUT / 'release' / 'release.html'}; "
        f"{time.perf_counter() - start:.1f} s"
    )
    return EXIT_VIOLATION if summary.violation else EXIT_INCONCLUSIVE if summary.inconclusive else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
