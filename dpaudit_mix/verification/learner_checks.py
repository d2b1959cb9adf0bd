"""The learner checks: the noise DP-MixMin really adds (a χ² test on probe fits whose every gradient
is known), and an empirical white-box audit of the learner against its claim."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from scipy.linalg import helmert
from scipy.stats import chi2

from .. import accounting
from ..audit.many_run.engine import run_audit
from ..audit.spec import AuditSpec
from ..base.randomness import stream
from ..learner import LearnerConfig, fit
from ..problem import Problem
from .levels import CLIP, DELTA, FALSE_ALARM, OUTLIER_LOGP, PROBE_K, PROBE_N, CheckResult, Level, result_of
from .variants import Variant


def probe_problem() -> Problem:
    """n examples on which all k proxies agree, so every gradient is 0 and only noise (and a
    canary) moves λ; one held-out outlier example serves as the natural canary."""
    outlier = np.full((1, PROBE_K), OUTLIER_LOGP)
    outlier[0, 0] = 0.0
    return Problem(
        np.zeros((PROBE_N, PROBE_K)), tuple(f"s{i}" for i in range(PROBE_K)), heldout_logp=outlier, task="probe"
    )


def _probe_learning_rate(required_sigma: float, sample_rate: float, steps: int) -> float:
    """η that makes the centred log λ of an honest probe run standard normal per direction."""
    return sample_rate * PROBE_N / (required_sigma * CLIP * math.sqrt(steps))


def noise_conformance(variant: Variant, level: Level, seed: int = 0) -> CheckResult:
    """The learner adds the noise the accountant requires for the claim.

    On the probe problem every gradient is 0, so after T steps centred log λ is exactly
    −(η/(qn)) Σ_t noise_t (EG ignores constants): with σ the accountant requires for (ε, δ, q, T),
    its coordinates in an orthonormal basis of the sum-zero plane are i.i.d. N(0, s²),
    s = ησC√T/(qn). Each coordinate's variance, and their pooled variance, is tested with a
    two-sided χ² test at total false-alarm rate FALSE_ALARM.
    """
    cases = []
    basis = helmert(PROBE_K)  # (k − 1, k): orthonormal rows, each orthogonal to the ones vector
    tests = PROBE_K  # k − 1 coordinates plus the pooled variance
    for target, q, steps in level.conformance:
        required = accounting.calibrate(target, DELTA, q, steps)
        sigma = variant.sigma(target, DELTA, q, steps)
        rate = _probe_learning_rate(required, q, steps)
        config = LearnerConfig(steps=steps, clip=CLIP, noise_multiplier=sigma, sample_rate=q, learning_rate=rate)
        noise = stream(seed, "verify-conformance", epsilon=target, sample_rate=q, steps=steps)
        weights = fit(probe_problem(), config, level.conformance_runs, noise, privatiser=variant.privatiser).weights
        scale = rate * required * CLIP * math.sqrt(steps) / (q * PROBE_N)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.log(weights) @ basis.T / scale
        runs = level.conformance_runs
        ratios = np.mean(z**2, axis=0)
        pooled = float(np.mean(ratios))
        stats = [(runs * r, runs) for r in ratios] + [(runs * (PROBE_K - 1) * pooled, runs * (PROBE_K - 1))]
        p_values = [2 * min(chi2.cdf(s, dof), chi2.sf(s, dof)) if np.isfinite(s) else 0.0 for s, dof in stats]
        ok = min(p_values) >= FALSE_ALARM / tests
        cases.append(
            {
                "epsilon": target,
                "sample_rate": q,
                "steps": steps,
                "runs": runs,
                "required_noise_multiplier": required,
                "noise_multiplier": sigma,
                "variance_ratio_pooled": pooled,
                "variance_ratio_min": float(np.min(ratios)),
                "variance_ratio_max": float(np.max(ratios)),
                "min_p_value": float(min(p_values)),
                "passed": bool(ok),
                "why": (
                    f"ε={target:g} q={q:g} T={steps}: observed/required noise variance {pooled:.3f} "
                    f"(per direction {np.min(ratios):.3f}–{np.max(ratios):.3f}), p={min(p_values):.2g}"
                ),
            }
        )
    return result_of("noise_conformance", cases, f"{len(cases)} settings add the required noise")


def empirical_soundness(variant: Variant, level: Level, seed: int = 0) -> CheckResult:
    """A white-box audit of the learner on the probe problem finds no violation of the claim.

    The verdict is the audit's: no CP point below the claimed trade-off curve (the privacy
    profile of the accountant that calibrated σ) and no strict ε_LB above ε. The curve, unlike
    the single (ε, δ) point, is tight enough to flag any mechanism that leaks ~1.5× its claim,
    whatever the cause: noise, sensitivity (clipping) or sampling. The probe's zero gradients
    make the audit as tight as the mechanism allows; the natural outlier canary's unclipped
    gradient is ≈ 5C, so it exposes missing or loose clipping.
    """
    cases: list[dict[str, Any]] = []
    problem = probe_problem()
    for point in level.audits:
        sigma = variant.sigma(point.epsilon, DELTA, point.sample_rate, point.steps)
        required = accounting.calibrate(point.epsilon, DELTA, point.sample_rate, point.steps)
        spec = AuditSpec(
            mechanism=variant.mechanism("dpmixmin"),
            problem="probe",
            task="probe",
            epsilon=point.epsilon,
            delta=DELTA,
            rho=1.0,
            steps=point.steps,
            clip=CLIP,
            sample_rate=point.sample_rate,
            learning_rate=_probe_learning_rate(required, point.sample_rate, point.steps),
            canaries=point.canaries,
            natural_policy="index",
            threats=("white_box",),
            controls=False,
            runs=level.audit_runs,
            seed=seed,
            chunk_size=4096,
        )
        with tempfile.TemporaryDirectory() as tmp:
            outcome = run_audit(spec, Path(tmp), noise_multiplier=sigma, progress=False, problem=problem)
        for r in outcome.summary.results:
            ok = r.epsilon_lower_bound <= point.epsilon and not r.profile_violation
            claim = f"claimed μ {r.claimed_mu:.3f}" if r.claimed_mu is not None else "claimed PLD profile"
            cases.append(
                {
                    "epsilon": point.epsilon,
                    "sample_rate": point.sample_rate,
                    "steps": point.steps,
                    "canary": r.canary,
                    "runs": r.runs,
                    "noise_multiplier": sigma,
                    "epsilon_lower_bound": r.epsilon_lower_bound,
                    "epsilon_lower_bound_gdp": r.epsilon_lower_bound_gdp,
                    "mu_lower_bound": r.mu_lower_bound,
                    "profile_violation": r.profile_violation,
                    "passed": ok,
                    "why": (
                        f"{r.canary} canary, q={point.sample_rate:g} T={point.steps}: "
                        f"ε_LB {r.epsilon_lower_bound:.3f}, GDP ε_LB {r.epsilon_lower_bound_gdp:.3f} "
                        f"vs claimed {point.epsilon:g}; μ_LB {r.mu_lower_bound:.3f} ({claim}); "
                        + (
                            "CP point BELOW the claimed curve"
                            if r.profile_violation
                            else "on or above the claimed curve"
                        )
                    ),
                }
            )
    top = max(c["epsilon_lower_bound_gdp"] / c["epsilon"] for c in cases)
    return result_of(
        "empirical_soundness",
        cases,
        f"{len(cases)} audits on or above the claimed trade-off curve (largest GDP ε_LB/ε {top:.2f})",
    )
