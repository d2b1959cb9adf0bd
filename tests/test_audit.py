import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix.audit.many_run.engine import run_audit
from dpaudit_mix.audit.spec import AuditSpec, load_spec
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, save

from .conftest import random_problem


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    prob = random_problem(260, 4, seed=3)
    held = random_problem(20, 4, seed=4).logp
    path = tmp_path / "p.npz"
    save(Problem(prob.logp, prob.sources, heldout_logp=held), path)
    return path


def write_spec(tmp_path: Path, problem_file: Path, **keys) -> Path:
    base = {
        "problem": str(problem_file),
        "rho": 0.5,
        "steps": 10,
        "runs": 256,
        "chunk_size": 64,
        "canaries": ["max_clip", "natural"],
        "natural_policy": "index",
        "natural_index": 3,
    }
    base.update(keys)
    lines = [
        f"{k} = {json.dumps(v)}" if not isinstance(v, bool) else f"{k} = {str(v).lower()}" for k, v in base.items()
    ]
    path = tmp_path / "spec.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def results(summary: dict) -> dict:
    return {(r["canary"], r["threat"], r["noise"]): r["epsilon_lower_bound"] for r in summary["results"]}


@pytest.mark.parametrize("configurations", [3, pytest.param(8, marks=pytest.mark.full)])
def test_soundness_over_small_configurations(tmp_path: Path, configurations: int) -> None:
    """Honest mechanisms: no private ε_LB above the claim, over many small audits (the first
    three of the eight that `make full` runs)."""
    rng = np.random.default_rng(0)
    worst = 0.0
    for i in range(configurations):
        prob = random_problem(int(rng.integers(20, 200)), int(rng.integers(2, 8)), seed=100 + i)
        path = tmp_path / f"p{i}.npz"
        save(Problem(prob.logp, prob.sources, heldout_logp=prob.logp[:5]), path)
        eps = float(rng.choice([0.5, 1.0, 2.0, 4.0]))
        spec = AuditSpec(
            problem=str(path),
            epsilon=eps,
            rho=1.0,
            steps=int(rng.integers(1, 20)),
            sample_rate=float(rng.choice([1.0, 0.5])),
            clip=float(rng.uniform(0.2, 3)),
            runs=768,  # 512 before each result took a quarter of α (its verdict's level is the audit's)
            seed=i,
            controls=False,
            natural_policy="random",
        )
        summary = run_audit(spec, tmp_path / f"a{i}", progress=False).summary
        assert not summary.violation
        worst = max(worst, max(r.epsilon_lower_bound / eps for r in summary.results))
    # No violation already means every ε_LB ≤ ε (there are no controls); the audits must also see
    # something, or "no violation" would hold for an attack that never fires.
    assert worst > 0.1


def test_power_of_controls_and_violation_exit_code(tmp_path: Path, problem_file: Path, capsys) -> None:
    spec = write_spec(tmp_path, problem_file, runs=400, chunk_size=128)
    out = tmp_path / "honest"
    assert main(["audit", str(spec), "--out", str(out)]) == 0
    assert f"dpaudit-mix: no violation of the claimed epsilon 1; report {out}/report.html" in capsys.readouterr().err
    summary = json.loads((out / "audit.json").read_text())
    by = results(summary)
    # σ = 0 controls: in and out runs separate perfectly, the bound is the CP limit for 100 + 100.
    assert by[("max_clip", "white_box", False)] > 3.0 and by[("max_clip", "black_box", False)] > 3.0
    assert all(by[key] <= 1.0 for key in by if key[2])
    for name in ("report.md", "report.html", "scores.png", "roc.png", "epsilon.png"):
        assert (out / name).stat().st_size > 0
    broken = tmp_path / "broken"
    code = main(["audit", str(spec), "--out", str(broken), "--noise-multiplier", "0.3"])
    err = capsys.readouterr().err
    assert code == 3 and "VIOLATION" in err
    broken_by = results(json.loads((broken / "audit.json").read_text()))
    assert max(broken_by[key] for key in broken_by if key[2]) > 1.0  # the leak shows in a private result


def test_same_seed_same_result_for_any_chunking_and_dask(tmp_path: Path, problem_file: Path) -> None:
    from dask.distributed import LocalCluster

    a = run_audit(load_spec(write_spec(tmp_path, problem_file)), tmp_path / "a", progress=False).summary
    b = run_audit(
        load_spec(write_spec(tmp_path, problem_file, chunk_size=192)), tmp_path / "b", progress=False, threads=1
    ).summary
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        c = run_audit(
            load_spec(write_spec(tmp_path, problem_file, chunk_size=128)),
            tmp_path / "c",
            backend="dask",
            scheduler=cluster.scheduler_address,
            progress=False,
        ).summary
    assert a == b == c and a.results


def test_kill_and_resume_gives_identical_audit(tmp_path: Path, problem_file: Path) -> None:
    spec = write_spec(tmp_path, problem_file, runs=1024, steps=60, chunk_size=64)  # 4 settings × 16 chunks
    reference = run_audit(load_spec(spec), tmp_path / "ref", progress=False).summary.to_dict()
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "dpaudit_mix.cli", "audit", str(spec), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and len(list((out / "chunks").glob("*.npz"))) < 3:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = len(list((out / "chunks").glob("*.npz")))
    assert 3 <= finished < 4 * 16 and not (out / "audit.json").exists()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert json.loads((out / "audit.json").read_text()) == json.loads(json.dumps(reference))


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"bogus": 1}, "unknown key"),
        ({"runs": 3}, "runs must be >= 4"),
        ({"confidence": 1.5}, "confidence"),
        ({"natural_index": 99}, "out of range"),
        ({"problem": "/no/such.npz"}, "neither an embedded problem"),
        ({"canaries": ["golden"]}, "canaries"),
    ],
)
def test_bad_specs_exit_2(tmp_path: Path, problem_file: Path, capsys, keys: dict, message: str) -> None:
    spec = write_spec(tmp_path, problem_file, **keys)
    out = tmp_path / "out"
    assert main(["audit", str(spec), "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not (out / "audit.json").exists()


def test_bound_command(capsys) -> None:
    assert main(["bound", "--fp", "0", "--fn", "0", "--negatives", "500", "--positives", "500", "--delta", "1e-5"]) == 0
    assert json.loads(capsys.readouterr().out)["epsilon_lower_bound"] > 4.9
    assert main(["bound", "--fp", "9", "--fn", "0", "--negatives", "5", "--positives", "5", "--delta", "1e-5"]) == 2
    assert "false positives" in capsys.readouterr().err


def test_missing_spec(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_spec(tmp_path / "nope.toml")


def test_an_audit_spec_may_give_detect_instead_of_runs(tmp_path: Path, problem_file: Path, capsys) -> None:
    """detect = 6: the engine runs as many runs as the planner says catch σ/6 for the claim the
    mechanism calibrated (at each result's share of α); detect beside runs is one line, exit 2."""
    from dpaudit_mix import accounting, plan_audit
    from dpaudit_mix.audit.verdict import result_confidence

    path = write_spec(tmp_path, problem_file, detect=6.0, canaries=["max_clip"], threats=["white_box"], controls=False)
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines() if not line.startswith("runs")))
    summary = run_audit(load_spec(path), tmp_path / "a", progress=False).summary
    sigma = accounting.calibrate(1.0, 1e-5, 1.0, 10)
    plan = plan_audit(
        1.0, 1e-5, [accounting.GaussianPhase(sigma, 1.0, 10)], detect=6.0, confidence=result_confidence(0.95, 1)
    )
    assert plan.met and plan.runs is not None
    (result,) = summary.results
    assert result.runs == 2 * plan.runs and result.power is not None and result.power.detects <= 6.0
    both = write_spec(tmp_path, problem_file, detect=6.0)
    assert main(["audit", str(both), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give one of detect or runs, not detect and runs" in err[0]
