"""Two releases on one ledger with a budget for one, started together, N times; then kill -9.

Each trial starts two `dpaudit-mix release` processes (the real CLI, verify-accountant --quick
included) on one problem and one ledger whose budget_epsilon admits one release: exactly one must
publish and the other exit 3 at the budget stage, with the ledger's composed ε within budget.
Last, a release killed with SIGKILL during its audit must leave a reservation that counts (the
next release on the same data is refused at the budget stage).

    .venv/bin/python bench/ledger_race.py --trials 10      # about 15 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dpaudit_mix.base.cache import user_cache_dir
from dpaudit_mix.problem import Problem, data_sha256, load, save
from dpaudit_mix.release import ledger

DELTA = 1e-5


def _release(spec: Path, out: Path, book: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dpaudit_mix.cli", "release", str(spec), "--out", str(out), "--ledger", str(book)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpaudit-race-") as tmp:
        root = Path(tmp)
        rng = np.random.Generator(np.random.PCG64(2026))  # synthetic data for a drill, not a result
        problem = root / "p.npz"
        save(
            Problem(
                np.log(rng.beta(2.0, 1.0, size=(300, 5))),
                tuple(f"s{i}" for i in range(5)),
                heldout_logp=np.log(rng.beta(2.0, 1.0, size=(10, 5))),
                task="t",
            ),
            problem,
        )
        data = data_sha256(load(problem))
        outcomes = []
        for trial in range(args.trials):
            book = root / f"ledger-{trial}.sqlite"
            spec = root / f"spec-{trial}.toml"
            spec.write_text(
                f'problem = "{problem}"\nepsilon = 1.0\nsteps = 20\naudit_runs = 2000\n'
                'budget_epsilon = 1.2\nidentity = "rows"\n'
            )
            procs = [_release(spec, root / f"out-{trial}-{i}", book) for i in range(2)]
            results = [(p.wait(), p.stderr.read()) for p in procs]
            codes = sorted(code for code, _ in results)
            stages = [
                "budget" if "REFUSED (budget)" in err else "published" if code == 0 else err.strip()[-80:]
                for code, err in results
            ]
            total = ledger.spent(ledger.read(book), data, problem_sha256="", delta=DELTA)
            ok = codes == [0, 3] and sorted(stages) == ["budget", "published"] and total <= 1.2
            outcomes.append(ok)
            print(
                f"trial {trial}: exit codes {codes}, {stages}, ledger eps {total:.4f} <= 1.2: "
                f"{'ok' if ok else 'FAILED'}",
                flush=True,
            )
        print(f"{sum(outcomes)} of {len(outcomes)} trials: exactly one published, the other refused at the budget")

        book = root / "ledger-kill.sqlite"
        spec = root / "spec-kill.toml"
        spec.write_text(
            f'problem = "{problem}"\nepsilon = 1.0\nsteps = 20\naudit_runs = 200000\n'
            'budget_epsilon = 1.2\nidentity = "rows"\n'
        )
        victim = _release(spec, root / "out-kill", book)
        chunks = user_cache_dir() / "release-audits"  # a release audits in its private work folder
        while victim.poll() is None and not any(chunks.glob("*/chunks/*.npz")):
            time.sleep(0.5)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        entries = ledger.read(book)
        print(
            f"kill -9 during the audit: exit {victim.returncode}, ledger entries "
            f"{[e.status for e in entries]}, "
            f"eps counted {ledger.spent(entries, data, problem_sha256='', delta=DELTA):.4f}"
        )
        spec.write_text(spec.read_text().replace("audit_runs = 200000", "audit_runs = 2000"))
        after = _release(spec, root / "out-after-kill")
        code, err = after.wait(), after.stderr.read()
        print(f"next release on the same data: exit {code}: {err.strip().splitlines()[-1][:160] if err else ''}")
        print(
            json.dumps(
                {
                    "trials": len(outcomes),
                    "ok": sum(outcomes),
                    "kill_left_reservation": [e.status for e in entries] == ["reserved"],
                    "next_refused_at_budget": code == 3 and "REFUSED (budget)" in err,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
