"""Benchmark: the report commands against their wall-clock budgets on 2 cores, as ratios.

1. `dpaudit-mix verify-accountant --quick` (budget 120 s) and with `--self-test`.
2. `dpaudit-mix recovery recovery/default.toml` (budget 120 s), and one recovery cell as a single
   vectorised learner call against the loop of single-run fits it replaces.
3. `dpaudit-mix pipeline pipeline/default.toml` (budget 900 s) and the text track's default spec
   with `--workers 2` (budget 180 s); skip both with --no-pipeline.
4. The one-run audits of the pipeline's DP-SGD (`audits/opacus-one-run.toml`,
   `audits/user-dpsgd-one-run.toml`) and the model release (`releases/model.toml`, into a
   temporary ledger), no budget.
5. The waits of a new user: the demo (`python -m dpaudit_mix.demo`, what `make demo` runs after
   the install, budget 90 s) with an empty user cache and no reports/demo, then run again;
   `pipeline/quick.toml` and `audits/opacus-one-run.toml` and their reruns into the same folder
   (CPU time of the rerun, budget 3 s beyond the CLI's start-up; the pipeline's also without its
   finished-run stamp, every stage cached); the λ release `releases/default.toml` from a fresh
   user cache (its CPU, budget 60 s); and the test suite as `make test` runs it (budget 480 s).
Each command runs in a fresh temporary output folder (no stage cache; built problems and
proxies come from the user cache, as for a user's second command).
Writes bench/results/budgets.md (a run with --only: budgets-ONLY.md), each budgeted command's
share of its budget a ratio.
Usage: python bench/budgets.py [--no-pipeline] [--only SUBSTRING | --only waits | --only demo | --only lambda]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import record
from record import Ratio

from dpaudit_mix.base.randomness import stream
from dpaudit_mix.data import registry
from dpaudit_mix.learner import LearnerConfig, fit

NOISE = stream(0, "learner-noise", bench="budgets")
ROOT = Path(__file__).resolve().parent.parent


def wall(*argv: str) -> float:
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "DPAUDIT_MIX_LEDGER": os.path.join(out, "ledger.sqlite")}
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "dpaudit_mix.cli", *argv, "--out", os.path.join(out, "out")],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        return time.perf_counter() - start


def measured(
    argv: list[str], env: dict[str, str] | None = None, printed: list[str] | None = None
) -> tuple[float, float]:
    """(wall, CPU of the process and its children) seconds of ``argv``, run from the repository
    (``env``: variables set for it; ``printed``: given, it gets what the command printed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        argv,
        check=True,
        stdout=subprocess.DEVNULL if printed is None else subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        text=True,
    )
    seconds = time.perf_counter() - start
    if printed is not None:
        printed.append(done.stdout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def demo_waits() -> list[tuple[str, float, float | None]]:
    """The demo of item 5: (name, seconds, budget)."""
    demo = [sys.executable, "-m", "dpaudit_mix.demo"]
    with tempfile.TemporaryDirectory() as cache:
        # as after the install: no user cache, no reports/demo (the demo's own folder, which it
        # rewrites on every run) to resume its audit from
        shutil.rmtree(ROOT / "reports" / "demo", ignore_errors=True)
        printed: list[str] = []
        first = measured(demo, {"DPAUDIT_MIX_CACHE": cache}, printed)[0]
        again = measured(demo, {"DPAUDIT_MIX_CACHE": cache})[0]  # its caches and reports/demo now there
    print("the demo printed (what the README shows):")
    print("\n".join("  " + line for line in printed[0].splitlines()))
    return [("demo (after the install, empty caches)", first, 90.0), ("  run again", again, None)]


def release_wait() -> list[tuple[str, float, float | None]]:
    """The λ release from a fresh user cache (problem, proxies, verification and audit all
    computed), into a temporary ledger: its wall time and CPU (user + sys, both cores counted)."""
    cli = [sys.executable, "-m", "dpaudit_mix.cli"]
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as cache:
        release = [*cli, "release", "releases/default.toml", "--out", str(Path(out) / "r")]
        env = {"DPAUDIT_MIX_CACHE": cache, "DPAUDIT_MIX_LEDGER": str(Path(out) / "ledger.sqlite")}
        seconds, cpu = measured(release, env)
    return [("release releases/default.toml (fresh cache)", seconds, None), ("  its CPU (user + sys)", cpu, 60.0)]


def waits() -> list[tuple[str, float, float | None]]:
    """The rest of item 5: (name, seconds, budget)."""
    cli = [sys.executable, "-m", "dpaudit_mix.cli"]
    rows: list[tuple[str, float, float | None]] = []
    with tempfile.TemporaryDirectory() as out:
        quick = [*cli, "pipeline", "pipeline/quick.toml", "--out", out]
        rows.append(("pipeline pipeline/quick.toml", measured(quick)[0], None))
        start_up = measured([*cli, "--help"])[1]
        rows.append(("  its rerun, CPU beyond start-up", measured(quick)[1] - start_up, 3.0))
        (Path(out) / ".pipeline.finished").unlink()
        rows.append(("  rerun, no stamp (every stage cached), CPU", measured(quick)[1] - start_up, None))
    with tempfile.TemporaryDirectory() as out:
        audit = [*cli, "audit", "audits/opacus-one-run.toml", "--out", out]
        rows.append(("audit audits/opacus-one-run.toml", measured(audit)[0], None))
        rows.append(("  its rerun, CPU beyond start-up", measured(audit)[1] - start_up, 3.0))
    marks = "not selftest and not full and not guides"  # the Makefile's test target
    tests = [sys.executable, "-m", "pytest", "-q", "-n", "auto", "--dist", "worksteal", "-m", marks]
    rows.append(("make test (the suite)", measured(tests)[0], 480.0))
    return rows


def cell_speedup(seeds: int = 5, repeats: int = 5) -> tuple[float, float]:
    """One recovery cell (mnist digit-0, ρ = 0.1): vectorised call vs a loop of single fits."""
    problem = registry.build("mnist", "digit-0").subset(range(240))
    config = LearnerConfig(noise_multiplier=37.3)
    start = time.perf_counter()
    for _ in range(repeats):
        fit(problem, config, seeds, NOISE)
    batched = (time.perf_counter() - start) / repeats
    start = time.perf_counter()
    for _ in range(repeats):
        for r in range(seeds):
            fit(problem, config, [r], NOISE)
    return batched, (time.perf_counter() - start) / repeats


def row(name: str, seconds: float, budget: float | None, ratios: list[Ratio]) -> None:
    """Print a command's time against its budget; a budgeted one's share of it is a ratio."""
    ratio = f"{seconds / budget:.2f} of budget {budget:.0f} s" if budget else "no budget"
    print(f"{name:<42} {seconds:7.1f} s   {ratio}", flush=True)
    if budget:
        ratios.append(Ratio(f"{name.strip()}: share of its {budget:.0f} s budget", seconds / budget, "lower"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-pipeline", action="store_true")
    parser.add_argument("--only", default="", help="run only the commands whose name holds this")
    args = parser.parse_args()
    # a part run by --only keeps its own results file, so the whole run's stays as it was
    name = "budgets" if not args.only else "budgets-" + "".join(c if c.isalnum() else "-" for c in args.only)
    with record.captured(name) as result:
        measure(args, result.ratios)


def measure(args: argparse.Namespace, ratios: list[Ratio]) -> None:
    commands: list[tuple[tuple[str, ...], float | None]] = [
        (("verify-accountant", "--quick"), 120.0),
        (("verify-accountant", "--quick", "--self-test"), None),
        (("recovery", "recovery/default.toml"), 120.0),
        (("audit", "audits/opacus-one-run.toml"), None),
        (("audit", "audits/user-dpsgd-one-run.toml"), None),
        (("release", "releases/model.toml"), None),
    ]
    if not args.no_pipeline:
        commands.append((("pipeline", "pipeline/default.toml"), 900.0))
        commands.append((("pipeline", "pipeline/shakespeare-users.toml", "--workers", "2"), 180.0))
    for argv, budget in commands:
        name = " ".join(argv)
        if args.only not in name:
            continue
        row(name, wall(*argv), budget, ratios)
    for rows in (demo_waits, release_wait, waits):
        if (
            args.only in ("", "waits")
            or (rows is demo_waits and args.only == "demo")
            or (rows is release_wait and args.only == "lambda")
        ):
            for name, seconds, budget in rows():
                row(name, seconds, budget, ratios)
    if args.only:
        return
    batched, looped = cell_speedup()
    print(
        f"recovery cell (5 runs): vectorised {batched * 1e3:.1f} ms, loop of fits {looped * 1e3:.1f} ms, "
        f"speed-up {looped / batched:.1f}x"
    )
    ratios.append(Ratio("recovery cell: vectorised call over the loop of fits", looped / batched, "higher"))


if __name__ == "__main__":
    main()
