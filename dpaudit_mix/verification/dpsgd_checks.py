"""The DP-SGD checks: many-run and one-run audits of the pipeline's Opacus finetune and its
user-level DP-SGD, each at the claim it is calibrated for."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .. import accounting
from ..audit.many_run.engine import run_audit
from ..audit.mechanisms.base import CanaryCollector, Setting
from ..audit.mechanisms.dpsgd import user_windows
from ..audit.mechanisms.once import OpacusCanaryRun
from ..audit.one_run.audit import audit_one_run
from ..audit.spec import AuditSpec
from ..base.randomness import stream
from ..models import cnn, userdp
from ..problem import Problem
from .levels import CLIP, DELTA, CheckResult, Level, OneRunPoint, result_of
from .variants import Variant

#: the DP-SGD probe: PROBE_USERS users of two examples each, whose log-likelihood rows differ (so
#: the Opacus probe has gradients to clip) and none of whose windows holds the canary's code.
PROBE_USERS, PROBE_SOURCES = 8, 4


def dpsgd_probe_problem() -> Problem:
    n = 2 * PROBE_USERS
    logp = -((np.arange(n)[:, None] + np.arange(PROBE_SOURCES)) % PROBE_SOURCES).astype(float)
    sources = tuple(f"s{i}" for i in range(PROBE_SOURCES))
    return Problem(logp, sources, users=np.repeat(np.arange(PROBE_USERS), 2), task="probe")


def empirical_dpsgd(variant: Variant, level: Level, kind: str, seed: int = 0) -> CheckResult:
    """A white-box audit of the pipeline's own DP-SGD of ``kind`` (the Opacus finetune, or the
    user-level DP-SGD), with its Dirac canary, finds no violation of the claim.

    A variant's audit runs the registered mechanism it names in place of the pipeline's. Their
    verdict is the profile's: a σ halved inside the optimizer, batches of fixed size where the
    accountant assumes Poisson, or clipping per window instead of per user each puts a CP point
    below the claimed trade-off curve.
    """
    cases: list[dict[str, Any]] = []
    for point in (p for p in level.dpsgd_audits if p.mechanism == kind):
        spec = AuditSpec(
            mechanism=variant.mechanism(point.mechanism),
            problem="probe",
            task="probe",
            epsilon=point.epsilon,
            delta=DELTA,
            rho=1.0,
            steps=point.steps,
            clip=CLIP,
            sample_rate=point.sample_rate,
            user_level=point.mechanism == "user-dpsgd",
            canaries=("max_clip",),
            threats=("white_box",),
            controls=False,
            runs=point.runs,
            seed=seed,
        )
        with tempfile.TemporaryDirectory() as tmp:
            outcome = run_audit(spec, Path(tmp), progress=False, problem=dpsgd_probe_problem(), threads=1)
        for r in outcome.summary.results:
            ok = r.epsilon_lower_bound <= point.epsilon and not r.profile_violation
            cases.append(
                {
                    "mechanism": point.mechanism,
                    "epsilon": point.epsilon,
                    "sample_rate": point.sample_rate,
                    "steps": point.steps,
                    "runs": r.runs,
                    "noise_multiplier": outcome.summary.noise_multiplier,
                    "epsilon_lower_bound": r.epsilon_lower_bound,
                    "profile_violation": r.profile_violation,
                    "passed": ok,
                    "why": (
                        f"{point.mechanism} ε={point.epsilon:g} q={point.sample_rate:g} T={point.steps}: "
                        f"ε_LB {r.epsilon_lower_bound:.3f}, AUROC {r.auroc:.3f}; "
                        + (
                            "CP point BELOW the claimed curve"
                            if r.profile_violation
                            else "on or above the claimed curve"
                        )
                    ),
                }
            )
    return result_of(f"empirical_{kind.replace('-', '_')}", cases, f"{len(cases)} audits on or above the claimed curve")


def _canary_run(variant: Variant, point: OneRunPoint, seed: int) -> tuple[CanaryCollector, accounting.GaussianPhase]:
    """The variant's one-run training of ``point`` and the phase its σ was calibrated for: the
    SmallCNN through Opacus on 64 made-up images per batch (Opacus' own calibration), or the
    user-level step on the DP-SGD probe's users (ours)."""
    run = variant.canary_run(point.mechanism)
    if issubclass(run, OpacusCanaryRun):
        batches = round(1 / point.sample_rate)
        epochs = point.steps // batches
        draws = stream(seed, "synthetic-inputs", verify="one-run-opacus").numpy()
        images = draws.random((64 * batches, 28, 28)).astype(np.float32)
        labels = draws.integers(10, size=64 * batches)
        sigma = cnn.finetune_sigma(point.epsilon, DELTA, batches, epochs)
        collect: CanaryCollector = run(images, labels, "multiclass", 64, epochs, sigma, CLIP, 0.1, seed)
    else:
        users = user_windows(dpsgd_probe_problem())
        sigma = accounting.calibrate(point.epsilon, DELTA, point.sample_rate, point.steps)
        config = userdp.UserLevelSGD(point.sample_rate, point.steps, sigma, CLIP, 0.01, users=len(users))
        collect = run(tuple(users), config, seed)
    return collect, accounting.GaussianPhase(sigma, point.sample_rate, point.steps)


def one_run_dpsgd(variant: Variant, level: Level, kind: str, seed: int = 0) -> CheckResult:
    """One training run of the pipeline's DP-SGD of ``kind`` with m Dirac canaries
    (:mod:`..audit.mechanisms.once`) finds no violation of the claim: neither Steinke's (ε, δ)
    bound nor the test of the claimed privacy profile rejects it.

    The canaries are sampled and clipped by the canary machinery, not by the mechanism's loader
    or its per-user code: a break there (fixed-size batches, per-window clipping) is the
    multi-run checks' to catch; a σ the optimizer really adds is this check's.
    """
    cases: list[dict[str, Any]] = []
    for point in (p for p in level.one_run_audits if p.mechanism == kind):
        collect, phase = _canary_run(variant, point, seed)
        member = stream(seed, "canary-membership", verify=kind, canaries=point.canaries).numpy().random(point.canaries)
        inside = member < 0.5
        scores = collect(Setting("max_clip", True), inside)["white_box"]
        accountant = "prv" if kind == "opacus" else accounting.DEFAULT_ACCOUNTANT
        result = audit_one_run(
            scores,
            inside,
            epsilon=point.epsilon,
            delta=DELTA,
            phases=[phase],
            accountant=accountant,
            profile_bound=False,
            seed=seed,
            label=f"verify-{kind}",
        )
        cases.append(
            {
                "mechanism": kind,
                "epsilon": point.epsilon,
                "sample_rate": point.sample_rate,
                "steps": point.steps,
                "canaries": point.canaries,
                "noise_multiplier": phase.noise_multiplier,
                "epsilon_lower_bound": result.epsilon_lower_bound,
                "profile_violation": result.profile_violation,
                "passed": not result.violation,
                "why": (
                    f"{kind} one run, m={point.canaries}, ε={point.epsilon:g} q={point.sample_rate:g} "
                    f"T={point.steps}: ε_LB {result.epsilon_lower_bound:.3f} ({result.correct} of {result.guesses} "
                    f"right); the claimed profile {'REJECTED' if result.profile_violation else 'not rejected'}"
                ),
            }
        )
    return result_of(f"one_run_{kind.replace('-', '_')}", cases, f"{len(cases)} one-run audits within the claim")
