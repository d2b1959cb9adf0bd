"""Benchmark: runs per second of whole audits (fits, scores, attack, bound; no report figures).

Problem: synthetic, n = 9,000, k = 14 (the paper's k), T = 100, full batch, ε = 1, δ = 1e-5.
1. 2,000 runs, one setting (max-clip canary, private, both threat models); target ≤ 5 s.
2. 2,000 runs, the default audit's four settings (natural and max-clip, each with a σ=0 control).
3. 200,000 runs, white-box max-clip, private only; target ≤ 10 min on 2 cores (skip: --no-large).
Usage: python bench/audit.py [--large-runs N] [--no-large]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import record

from dpaudit_mix.audit.many_run.engine import run_audit
from dpaudit_mix.audit.spec import AuditSpec
from dpaudit_mix.problem import Problem, save

N, K = 9_000, 14


def timed(spec: AuditSpec, out: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    summary = run_audit(spec, out, progress=False).summary
    return time.perf_counter() - start, summary


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--large-runs", type=int, default=200_000)
    parser.add_argument("--no-large", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    logp = np.log(rng.beta(2.0, 1.0, size=(N + 100, K)) ** rng.uniform(0.3, 3.0, size=K))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.npz"
        save(Problem(logp[:N], tuple(f"s{i}" for i in range(K)), heldout_logp=logp[N:]), path)
        base = AuditSpec(problem=str(path), rho=1.0, runs=2_000, steps=100, chunk_size=512)
        cases = [
            ("2,000 runs, max-clip, private", replace(base, canaries=("max_clip",), controls=False)),
            ("2,000 runs x 4 settings (default audit)", base),
        ]
        if not args.no_large:
            cases.append(
                (
                    f"{args.large_runs:,} runs, white-box max-clip",
                    replace(
                        base,
                        canaries=("max_clip",),
                        threats=("white_box",),
                        controls=False,
                        runs=args.large_runs,
                        chunk_size=4096,
                    ),
                )
            )
        print(f"n={N} k={K} T=100 full batch, eps=1, delta=1e-5")
        for i, (name, spec) in enumerate(cases):
            seconds, summary = timed(spec, Path(tmp) / f"a{i}")
            fits = spec.runs * len(summary.results) // len(spec.threats)
            best = max(r.epsilon_lower_bound for r in summary.results if r.noise)
            print(f"{name:<42} {seconds:8.1f} s   {fits / seconds:8,.0f} fits/s   private eps_LB max = {best:.3f}")


if __name__ == "__main__":
    with record.captured("audit"):
        main()
