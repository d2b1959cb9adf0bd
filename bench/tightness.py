"""Tightness of the audit: white-box max-clip ε_LB vs the claimed ε, as runs grow.

On the embedded mnist problem (task digit-0, ρ = 0.1, T = 100, full batch, δ = 1e-5). DESIGN §6
gives the statistical limit of the optimal Gaussian test at ε = 1: ≈0.04 for 2,000 runs, ≈0.53
for 200,000. Prints mean ± std over seeds. Usage: python bench/tightness.py [--large 100000]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from dpaudit_mix.audit.engine import AuditSpec, run_audit


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--large-seeds", type=int, default=2)
    args = parser.parse_args()
    print("white-box max-clip, mnist/digit-0, rho=0.1, T=100, delta=1e-5, 95% CP")
    with tempfile.TemporaryDirectory() as tmp:
        for eps in (1.0, 2.0, 5.0):
            for runs, seeds in ((2_000, args.seeds), (args.large, args.large_seeds)):
                bounds = []
                for seed in range(seeds):
                    spec = AuditSpec(epsilon=eps, runs=runs, seed=seed, canaries=("max_clip",),
                                     threats=("white_box",), controls=False, chunk_size=4096)
                    summary = run_audit(spec, Path(tmp) / f"{eps}-{runs}-{seed}", progress=False).summary
                    bounds.append(summary["results"][0]["epsilon_lower_bound"])
                b = np.array(bounds)
                print(f"eps={eps:g} runs={runs:>7,}  eps_LB = {b.mean():.3f} ± {b.std():.3f} "
                      f"(seeds 0..{seeds - 1}: {', '.join(f'{x:.3f}' for x in b)})  eps_LB/eps = {b.mean() / eps:.2f}")


if __name__ == "__main__":
    main()
