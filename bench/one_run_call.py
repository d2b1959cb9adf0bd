"""What one call of the one-run audit costs, its power included (targets: ≤ 1 s for 10³ canaries
and ≤ 3 s for 10⁴, with the training's phases, on 2 cores): wall time of ``audit_one_run`` on
exact Dirac-canary scores of a mechanism calibrated to (1, 1e-5), then of its power (what
audit.json and every report print), the first call in a fresh process (it builds the claimed
profile and simulates the power) and a second (both known), against the target.

    python bench/one_run_call.py
"""

from __future__ import annotations

import time

import record

from dpaudit_mix import accounting
from dpaudit_mix.audit.dirac import dirac_scores, simulated_released
from dpaudit_mix.audit.one_run.audit import audit_one_run
from dpaudit_mix.base.randomness import stream

DELTA = 1e-5
#: (canaries, q, T, target s)
CASES = ((1000, 0.1, 10, 1.0), (10_000, 0.1, 10, 3.0), (10_000, 1.0, 1, 3.0))


def main() -> None:
    print(
        "| canaries | q | T | call | audit s | power s | wall s | target s | ratio | ε_LB | ε_LB (profile) | detects |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for canaries, q, steps, target in CASES:
        sigma = accounting.calibrate(1.0, DELTA, q, steps)
        phases = [accounting.GaussianPhase(sigma, q, steps)]
        draws = stream(0, "simulated-scores", bench="one-run-call", canaries=canaries, q=q).numpy()
        member = draws.random(canaries) < 0.5
        scores = dirac_scores(simulated_released(member, sigma, q, steps, draws), sigma, q)
        for call in ("first", "second"):
            started = time.perf_counter()
            result = audit_one_run(scores, member, epsilon=1.0, delta=DELTA, phases=phases)
            audited = time.perf_counter()
            power = result.power
            wall = time.perf_counter() - started
            caught = "—" if power is None or power.detects is None else f"σ/{power.detects:g}"
            print(
                f"| {canaries} | {q:g} | {steps} | {call} | {audited - started:.2f} | {wall + started - audited:.2f} | "
                f"{wall:.2f} | {target:g} | {wall / target:.2f} | {result.epsilon_lower_bound:.3f} | "
                f"{result.epsilon_lower_bound_profile:.3f} | {caught} |"
            )


if __name__ == "__main__":
    with record.captured("one_run_call"):
        main()
