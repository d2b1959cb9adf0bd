"""The power an audit reports (:mod:`dpaudit_mix.audit.power`) against independent Monte Carlo:
for each claim, the predicted median ε_LB of an exactly-claimed mechanism and the smallest leak
σ/c flagged 90 % of the time, beside the same quantities from ``--audits`` fresh audits
(`audit_scores` on scores drawn from another stream) of the exact and the leaking mechanism.

Printed per claim: predicted and simulated median ε_LB with their ratio; the flag rate at the
predicted c and at the grid step below it; the seconds the power took. Usage:
python bench/power.py [--audits 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dpaudit_mix import accounting
from dpaudit_mix.audit import power as audit_power
from dpaudit_mix.audit.dirac import dirac_scores, simulated_released
from dpaudit_mix.audit.power import Power
from dpaudit_mix.audit.scores import audit_scores
from dpaudit_mix.randomness import stream

DELTA = 1e-5
#: (name, ε, phases or None, runs per side)
CLAIMS = (
    ("μ-GDP of ε = 1, 2,000 runs", 1.0, None, 1000),
    ("μ-GDP of ε = 1, 20,000 runs", 1.0, None, 10_000),
    ("full batch, ε = 2, T = 100, 4,000 runs", 2.0, "full", 2000),
    ("Dirac, q = 0.1, T = 20, ε = 2, 2,000 runs", 2.0, "dirac", 1000),
)


def _phases(kind: str | None, epsilon: float) -> list[accounting.GaussianPhase] | None:
    if kind is None:
        return None
    q, steps = (1.0, 100) if kind == "full" else (0.1, 20)
    return [accounting.GaussianPhase(accounting.calibrate(epsilon, DELTA, q, steps), q, steps)]


def _scores(
    phases: list[accounting.GaussianPhase] | None, mu: float, leak: float, per_side: int, seed: int, name: str
) -> tuple[np.ndarray, np.ndarray]:
    source = stream(seed, "simulated-scores", bench="power", claim=name, leak=leak).numpy()
    if phases is None or phases[0].sample_rate == 1:
        return mu * leak + source.standard_normal(per_side), source.standard_normal(per_side)
    p = phases[0]
    member = np.arange(2 * per_side) < per_side
    scores = dirac_scores(
        simulated_released(member, p.noise_multiplier / leak, p.sample_rate, p.steps, source),
        p.noise_multiplier,
        p.sample_rate,
    )
    return scores[:per_side], scores[per_side:]


def _audit(claim: tuple, leak: float, seed: int) -> tuple[float, bool, Power | None]:
    name, epsilon, phases, mu, per_side = claim
    scores_in, scores_out = _scores(phases, mu, leak, per_side, seed, name)
    result = audit_scores(scores_in, scores_out, epsilon=epsilon, delta=DELTA, phases=phases, seed=seed)
    return result.epsilon_lower_bound, result.violation, result.power


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--audits", type=int, default=200)
    args = parser.parse_args()
    for name, epsilon, kind, per_side in CLAIMS:
        phases = _phases(kind, epsilon)
        mu = (
            accounting.gdp_mu_of_epsilon(epsilon, DELTA)
            if phases is None
            else float(np.sqrt(sum(p.steps / p.noise_multiplier**2 for p in phases)))
        )

        claim = (name, epsilon, phases, mu, per_side)
        start = time.perf_counter()
        predicted = _audit(claim, 1.0, 0)[2]
        seconds = time.perf_counter() - start
        assert predicted is not None
        exact = [_audit(claim, 1.0, seed)[0] for seed in range(1, args.audits + 1)]
        median = float(np.median(exact))
        line = f"{name}: median ε_LB predicted {predicted.tight_lower_bound:.3f}, simulated {median:.3f}"
        line += f" (ratio {predicted.tight_lower_bound / median:.3f}); power took {seconds:.2f} s"
        print(line)
        if predicted.detects is None:
            print("  detects: beyond σ/10")
            continue
        leaks = audit_power.LEAKS
        below = leaks[leaks.index(predicted.detects) - 1] if leaks.index(predicted.detects) else 1.0
        for c in (predicted.detects, below):
            rate = np.mean([_audit(claim, c, seed)[1] for seed in range(1, args.audits + 1)])
            print(
                f"  σ/{c:g}: flagged in {rate:.1%} of {args.audits} audits "
                f"(predicted: ≥ 90 % from σ/{predicted.detects:g})"
            )


if __name__ == "__main__":
    main()
