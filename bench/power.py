"""The power an audit reports (:mod:`dpaudit_mix.audit.power`, :mod:`dpaudit_mix.audit.one_run.power`)
against independent Monte Carlo: for each claim, the predicted median ε_LB of an exactly-claimed
mechanism and the promised leak σ/c (flagged in ≥ 90 % of audits with 95 % confidence), beside the
same quantities from ``--audits`` fresh audits (scores drawn from another stream, audited by
`audit_scores` or `audit_one_run`) of the exact and the leaking mechanism.

Printed per claim, one table row: predicted and simulated median ε_LB; the promised σ/c with the
simulated audits it rests on; the fresh flag rate at σ/c and at the grid step below it, each with
its 95 % Clopper–Pearson interval; the seconds the power took. The promise holds where the fresh
rate at σ/c is ≥ 90 %. Usage: python bench/power.py [--audits 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import record
from statsmodels.stats.proportion import proportion_confint

from dpaudit_mix import accounting
from dpaudit_mix.audit import power as audit_power
from dpaudit_mix.audit.dirac import dirac_scores, simulated_released
from dpaudit_mix.audit.many_run.scores import audit_scores
from dpaudit_mix.audit.one_run.audit import audit_one_run
from dpaudit_mix.audit.power import Power
from dpaudit_mix.base.randomness import stream

DELTA = 1e-5
#: (name, ε, phases kind or None, runs per side or canaries, one-run)
CLAIMS = (
    ("many-run: μ-GDP of ε = 1, 2,000 runs", 1.0, None, 1000, False),
    ("many-run: μ-GDP of ε = 1, 20,000 runs", 1.0, None, 10_000, False),
    ("many-run: full batch, ε = 2, T = 100, 4,000 runs", 2.0, "full", 2000, False),
    ("many-run: Dirac, q = 0.1, T = 20, ε = 2, 2,000 runs", 2.0, "dirac", 1000, False),
    ("one-run: full batch, ε = 1, 1,000 canaries", 1.0, "full", 1000, True),
    ("one-run: full batch, ε = 1, 2,000 canaries", 1.0, "full", 2000, True),
    ("one-run: full batch, ε = 1, 10,000 canaries", 1.0, "full", 10_000, True),
    ("one-run: Dirac, q = 0.1, T = 20, ε = 2, 10,000 canaries", 2.0, "dirac", 10_000, True),
)


def _phases(kind: str | None, epsilon: float) -> list[accounting.GaussianPhase] | None:
    if kind is None:
        return None
    q, steps = (1.0, 100) if kind == "full" else (0.1, 20)
    return [accounting.GaussianPhase(accounting.calibrate(epsilon, DELTA, q, steps), q, steps)]


def _scores(
    phases: list[accounting.GaussianPhase] | None, mu: float, leak: float, member: np.ndarray, source
) -> np.ndarray:  # type: ignore[no-untyped-def]
    """White-box scores of canaries (``member`` True: in) released by the claimed mechanism at σ/leak."""
    if phases is None or phases[0].sample_rate == 1:
        return mu * leak * member + source.standard_normal(len(member))
    p = phases[0]
    released = simulated_released(member, p.noise_multiplier / leak, p.sample_rate, p.steps, source)
    return dirac_scores(released, p.noise_multiplier, p.sample_rate)


def _audit(claim: tuple, leak: float, seed: int) -> tuple[float, bool, Power | None]:
    name, epsilon, phases, mu, size, one_run = claim
    source = stream(seed, "simulated-scores", bench="power", claim=name, leak=leak).numpy()
    if one_run:
        member = source.random(size) < 0.5
        scores = _scores(phases, mu, leak, member, source)
        found = audit_one_run(
            scores, member, epsilon=epsilon, delta=DELTA, phases=phases, profile_bound=False, seed=seed
        )
        return found.epsilon_lower_bound, found.violation, found.power
    member = np.arange(2 * size) < size
    scores = _scores(phases, mu, leak, member, source)
    result = audit_scores(scores[:size], scores[size:], epsilon=epsilon, delta=DELTA, phases=phases, seed=seed)
    return result.epsilon_lower_bound, result.violation, result.power


def _rate(flags: list[bool]) -> str:
    k, n = int(sum(flags)), len(flags)
    low, high = proportion_confint(k, n, 0.05, method="beta")
    return f"{k}/{n} = {k / n:.1%} [{low:.1%}, {high:.1%}]"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--audits", type=int, default=200)
    args = parser.parse_args()
    seeds = range(1, args.audits + 1)
    print(
        "| claim | median ε_LB predicted | simulated | promised | its simulated audits | fresh at σ/c "
        "| fresh one step below | power s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, epsilon, kind, size, one_run in CLAIMS:
        phases = _phases(kind, epsilon)
        mu = (
            accounting.gdp_mu_of_epsilon(epsilon, DELTA)
            if phases is None
            else float(np.sqrt(sum(p.steps / p.noise_multiplier**2 for p in phases)))
        )
        claim = (name, epsilon, phases, mu, size, one_run)
        start = time.perf_counter()
        predicted = _audit(claim, 1.0, 0)[2]
        seconds = time.perf_counter() - start
        assert predicted is not None
        median = float(np.median([_audit(claim, 1.0, seed)[0] for seed in seeds]))
        head = f"| {name} | {predicted.tight_lower_bound:.3f} | {median:.3f} |"
        if predicted.detects is None:
            print(f"{head} beyond σ/10 | — | — | — | {seconds:.2f} |")
            continue
        leaks = audit_power.LEAKS
        below = leaks[leaks.index(predicted.detects) - 1] if leaks.index(predicted.detects) else 1.0
        at, under = ([_audit(claim, c, seed)[1] for seed in seeds] for c in (predicted.detects, below))
        flagged, simulated = predicted.flagged or (0, 0)
        print(
            f"{head} σ/{predicted.detects:g} | {flagged}/{simulated} | {_rate(at)} | σ/{below:g}: {_rate(under)} | "
            f"{seconds:.2f} |"
        )


if __name__ == "__main__":
    with record.captured("power"):
        main()
