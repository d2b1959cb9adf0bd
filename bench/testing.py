"""What dpaudit_mix.testing costs a user's CI (targets: check_accountant on the default grid
≤ 30 s, check_dpsgd at its default size ≤ 90 s, on 2 cores): wall time of each, on Opacus'
own RDP and PRV accountants and on the user's file of docs/testing.md.

    python bench/testing.py
"""

from __future__ import annotations

import re
import time
import types
import warnings
from pathlib import Path

import record
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

from dpaudit_mix.testing import check_accountant, check_dpsgd

TARGETS = {"check_accountant": 30.0, "check_dpsgd": 90.0}


def _opacus(kind: str):
    def epsilon(s: float, q: float, t: int, d: float) -> float:
        accountant = RDPAccountant() if kind == "rdp" else PRVAccountant()
        accountant.history = [(s, q, t)]
        return float(accountant.get_epsilon(d))

    def noise(e: float, q: float, t: int, d: float) -> float:
        return get_noise_multiplier(target_epsilon=e, target_delta=d, sample_rate=q, steps=t, accountant=kind)

    return epsilon, noise


def main() -> None:
    warnings.simplefilter("ignore")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "testing.md").read_text()
    user = types.ModuleType("user")
    exec(re.search(r"```python\n(.*?)```", doc, re.S).group(1), user.__dict__)  # type: ignore[union-attr]
    rows = []
    for kind in ("rdp", "prv"):
        epsilon, noise = _opacus(kind)
        start = time.perf_counter()
        check_accountant(epsilon, calibrate_fn=noise)
        rows.append(
            (
                f"check_accountant (Opacus {kind}, default grid, sweeps, calibrator)",
                "check_accountant",
                time.perf_counter() - start,
            )
        )
    start = time.perf_counter()
    report = check_dpsgd(user.my_setup)
    rows.append(
        (
            f"check_dpsgd (docs/testing.md setup, {report.details['canaries']} canaries)",
            "check_dpsgd",
            time.perf_counter() - start,
        )
    )
    print("| check | wall s | target s | ratio |")
    print("|---|---|---|---|")
    for label, target, seconds in rows:
        print(f"| {label} | {seconds:.1f} | {TARGETS[target]:.0f} | {seconds / TARGETS[target]:.2f} |")


if __name__ == "__main__":
    with record.captured("testing"):
        main()
