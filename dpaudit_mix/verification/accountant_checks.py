"""The accountant checks: the library accountants against each other and the exact Gaussian-DP ε,
calibration's round trip, and ε's monotonicity in σ, T and q."""

from __future__ import annotations

import math

import numpy as np

from .. import accounting
from ..base.errors import InputError
from .levels import (
    CALIBRATION_UNDERSHOOT,
    DELTA,
    PLD_GDP_SLACK,
    PRV_PLD_SLACK,
    RDP_BELOW_PLD_SLACK,
    RDP_IMPLEMENTATIONS_SLACK,
    CheckResult,
    Level,
    result_of,
    within,
)
from .variants import Variant


def _grid_epsilons(
    variant: Variant, grid: tuple[tuple[float, float, int, float], ...]
) -> list[dict[str, float] | InputError]:
    """Each grid point's ε under every built-in accountant (as ``variant`` runs it), all asked side
    by side; where the package refuses one, the points are asked one at a time, so that a refusal
    fails its own point only."""

    def requests(point: tuple[float, float, int, float]) -> list[tuple[list[accounting.GaussianPhase], float, str]]:
        sigma, q, steps, delta = point
        phases = [accounting.GaussianPhase(sigma, q, steps)]
        return [(phases, delta, variant.accountant(name)) for name in accounting.BUILTIN_ACCOUNTANTS]

    def named(values: list[float]) -> dict[str, float]:
        return dict(zip(accounting.BUILTIN_ACCOUNTANTS, values, strict=True))

    try:
        values = accounting.epsilon_each([r for point in grid for r in requests(point)])
    except InputError:
        answers: list[dict[str, float] | InputError] = []
        for point in grid:
            try:
                answers.append(named(accounting.epsilon_each(requests(point))))
            except InputError as exc:
                answers.append(exc)
        return answers
    width = len(accounting.BUILTIN_ACCOUNTANTS)
    return [named(values[i : i + width]) for i in range(0, len(values), width)]


def cross_accountant(variant: Variant, level: Level) -> CheckResult:
    """opacus RDP and PRV, dp_accounting PLD and RDP, and (q = 1) exact GDP agree within slack."""
    cases = []
    worst = {"prv_vs_pld": 0.0, "rdp_over_pld": 0.0, "pld_vs_gdp": 0.0}
    for (sigma, q, steps, delta), answer in zip(level.grid, _grid_epsilons(variant, level.grid), strict=True):
        phases = [accounting.GaussianPhase(sigma, q, steps)]
        point = f"σ={sigma:g} q={q:g} T={steps} δ={delta:g}"
        if isinstance(answer, InputError):  # the package refuses an answer that is no ε >= 0
            cases.append(
                {
                    "noise_multiplier": sigma,
                    "sample_rate": q,
                    "steps": steps,
                    "delta": delta,
                    "passed": False,
                    "why": f"{point}: {answer}",
                }
            )
            continue
        eps = dict(answer)
        eps["rdp_google"] = accounting.google_rdp_epsilon(phases, delta)
        if q == 1.0:
            eps["gdp"] = accounting.gdp_epsilon(sigma, steps, delta)
        why = []
        if not all(math.isfinite(v) and v >= 0 for v in eps.values()):
            why.append("an ε is negative or not finite")
        if eps["rdp"] < eps["pld"] - RDP_BELOW_PLD_SLACK[0] - RDP_BELOW_PLD_SLACK[1] * eps["pld"]:
            why.append(f"RDP {eps['rdp']:.4g} < PLD {eps['pld']:.4g}")
        if not within(eps["rdp"], eps["rdp_google"], RDP_IMPLEMENTATIONS_SLACK):
            why.append(f"opacus RDP {eps['rdp']:.4g} ≠ dp_accounting RDP {eps['rdp_google']:.4g}")
        if not within(eps["prv"], eps["pld"], PRV_PLD_SLACK):
            why.append(f"PRV {eps['prv']:.4g} ≠ PLD {eps['pld']:.4g}")
        if "gdp" in eps and not within(eps["pld"], eps["gdp"], PLD_GDP_SLACK):
            why.append(f"PLD {eps['pld']:.4g} ≠ exact GDP {eps['gdp']:.4g}")
        worst["prv_vs_pld"] = max(worst["prv_vs_pld"], abs(eps["prv"] - eps["pld"]))
        worst["rdp_over_pld"] = max(worst["rdp_over_pld"], eps["rdp"] - eps["pld"])
        if "gdp" in eps:
            worst["pld_vs_gdp"] = max(worst["pld_vs_gdp"], abs(eps["pld"] - eps["gdp"]))
        cases.append(
            {
                "noise_multiplier": sigma,
                "sample_rate": q,
                "steps": steps,
                "delta": delta,
                "epsilon": eps,
                "passed": not why,
                "why": f"{point}: " + ("; ".join(why) or ", ".join(f"{k} {v:.4g}" for k, v in eps.items())),
            }
        )
    summary = (
        f"{len(cases)} points agree; largest |PRV−PLD| {worst['prv_vs_pld']:.4f}, "
        f"RDP−PLD up to {worst['rdp_over_pld']:.3f}, |PLD−GDP| {worst['pld_vs_gdp']:.2e}"
    )
    return result_of("cross_accountant", cases, summary)


def calibration_round_trip(variant: Variant, level: Level) -> CheckResult:
    """σ calibrated for ε gives ε(σ) ≤ ε (no overshoot) and not far below it, every accountant."""
    # the slow searches first (PLD under Poisson sampling at a large ε took 9 of the 20 s), so
    # that the lanes finish together; the cases keep this order
    trips = sorted(
        (
            (target, q, steps, name)
            for name in accounting.BUILTIN_ACCOUNTANTS
            for q, steps in level.calibration_settings
            for target in level.calibration_targets
        ),
        key=lambda trip: (trip[3] != "pld", trip[1], -trip[0]),
    )
    sigmas = accounting.calibrate_each(
        [(target, DELTA, q, steps, variant.accountant(name)) for target, q, steps, name in trips]
    )
    spent_each = accounting.epsilon_each(
        [
            ([accounting.GaussianPhase(sigma, q, steps)], DELTA, variant.accountant(name))
            for sigma, (_, q, steps, name) in zip(sigmas, trips, strict=True)
        ]
    )
    cases = []
    for (target, q, steps, name), sigma, spent in zip(trips, sigmas, spent_each, strict=True):
        ok = (1 - CALIBRATION_UNDERSHOOT) * target <= spent <= target
        cases.append(
            {
                "accountant": name,
                "target_epsilon": target,
                "sample_rate": q,
                "steps": steps,
                "noise_multiplier": sigma,
                "epsilon": spent,
                "passed": ok,
                "why": f"{name} q={q:g} T={steps}: calibrated for ε={target:g}, spends {spent:.5g}",
            }
        )
    return result_of(
        "calibration_round_trip", cases, f"{len(cases)} calibrations land in [{1 - CALIBRATION_UNDERSHOOT:g}·ε, ε]"
    )


#: the base point (σ, q, T) of the monotonicity sweeps, and the direction ε must move along each axis.
_MONOTONE_BASE = (1.0, 0.1, 100)
_MONOTONE_DIRECTION = {"noise_multiplier": -1, "steps": +1, "sample_rate": +1}


def _swept(axis: str, value: float) -> accounting.GaussianPhase:
    """The base point (σ, q, T) with ``axis`` set to ``value``."""
    sigma, q, steps = _MONOTONE_BASE
    point = {"noise_multiplier": sigma, "sample_rate": q, "steps": steps, axis: value}
    return accounting.GaussianPhase(point["noise_multiplier"], point["sample_rate"], int(point["steps"]))


def monotonicity(variant: Variant, level: Level) -> CheckResult:
    """ε falls strictly as σ grows, and rises strictly with T and with q, every accountant."""
    sweeps = [
        (name, axis, values) for name in accounting.BUILTIN_ACCOUNTANTS for axis, values in level.monotone.items()
    ]
    requests = [
        ([_swept(axis, value)], DELTA, variant.accountant(name)) for name, axis, values in sweeps for value in values
    ]
    answers = iter(accounting.epsilon_each(requests))  # all sweeps side by side, in this order
    cases = []
    for name, axis, values in sweeps:
        direction = _MONOTONE_DIRECTION[axis]
        eps = [next(answers) for _ in values]
        ok = bool(np.all(direction * np.diff(eps) > 0))
        cases.append(
            {
                "accountant": name,
                "axis": axis,
                "values": list(values),
                "epsilon": eps,
                "passed": ok,
                "why": f"{name}: ε over {axis} {list(values)} is {[round(e, 4) for e in eps]}",
            }
        )
    return result_of("monotonicity", cases, f"{len(cases)} sweeps are strictly monotone")
