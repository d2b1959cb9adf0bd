"""The shipped DP-SGD audits (audits/opacus.toml, audits/user-dpsgd.toml) as a user runs them,
honest and with the noise multiplier at σ/1.5 (a mechanism leaking about 1.5× its claim).

Per audit: the verdict (exit code 0 / 3 / 4), each private result's strict, GDP and profile
ε_LB over the claimed ε, and the wall time on this machine's cores. Targets: honest → exit 0
(no violation, not inconclusive); σ/1.5 → exit 3. Usage: python bench/dpsgd_audits.py
[--runs N] (default: the specs' run counts) [--only opacus|user-dpsgd]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import record

from dpaudit_mix.audit.spec import load_spec

SPECS = {"opacus": "audits/opacus.toml", "user-dpsgd": "audits/user-dpsgd.toml"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int)
    parser.add_argument("--only", choices=sorted(SPECS))
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores")
    for name, path in SPECS.items():
        if args.only not in (None, name):
            continue
        spec = load_spec(path, runs=args.runs)
        with tempfile.TemporaryDirectory() as tmp:
            sigma = 0.0  # the honest audit (first) reads the calibrated σ
            for case, leak in (("honest", False), ("sigma/1.5", True)):
                out = Path(tmp) / case.replace("/", "-")
                start = time.perf_counter()
                command = [
                    sys.executable,
                    "-m",
                    "dpaudit_mix.cli",
                    "audit",
                    path,
                    "--out",
                    str(out),
                    "--runs",
                    str(spec.runs),
                ]
                if leak:
                    command += ["--noise-multiplier", str(sigma / 1.5)]
                code = subprocess.run(command, capture_output=True, text=True).returncode
                seconds = time.perf_counter() - start
                summary = json.loads((out / "audit.json").read_text())
                sigma = summary["calibrated_noise_multiplier"]
                eps = summary["claimed_epsilon"]
                print(
                    f"{name} {case}: exit {code}, {spec.runs} runs per setting, {seconds:.0f} s, "
                    f"σ {summary['noise_multiplier']:.4g}"
                )
                for r in summary["results"]:
                    print(
                        f"  {r['threat']:9s} {'private' if r['noise'] else 'control'}: ε_LB/ε strict "
                        f"{r['epsilon_lower_bound'] / eps:.3f}, GDP {r['epsilon_lower_bound_gdp'] / eps:.3f}, "
                        f"profile {r['epsilon_lower_bound_profile'] / eps:.3f}; "
                        f"profile violated {r['profile_violation']}; AUROC {r['auroc']:.3f}"
                    )


if __name__ == "__main__":
    with record.captured("dpsgd_audits"):
        main()
