"""Auditing scores from any stack: the library call, the command, and their agreement with the
audit engine on its own runs."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dpaudit_mix
from dpaudit_mix import accounting
from dpaudit_mix.audit.engine import run_audit, score_label
from dpaudit_mix.audit.report import write_report
from dpaudit_mix.audit.spec import AuditSpec
from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, save
from dpaudit_mix.randomness import stream

from .conftest import random_problem

DELTA = 1e-5


@pytest.mark.parametrize("sample_rate, threshold", [(1.0, "bonferroni"), (0.5, "split")])
def test_audit_scores_on_an_audits_scores_gives_its_results_exactly(
    tmp_path: Path, sample_rate: float, threshold: str
) -> None:
    prob = random_problem(200, 4, seed=3)
    path = tmp_path / "p.npz"
    save(Problem(prob.logp, prob.sources, heldout_logp=random_problem(10, 4, 4).logp), path)
    spec = AuditSpec(
        problem=str(path),
        epsilon=2.0,
        rho=1.0,
        steps=8,
        sample_rate=sample_rate,
        runs=256,
        seed=5,
        threshold=threshold,
        natural_policy="index",
        chunk_size=128,
    )
    outcome = run_audit(spec, tmp_path / "audit", progress=False)
    write_report(outcome, tmp_path / "audit")
    written = json.loads((tmp_path / "audit" / "audit.json").read_text())
    phases = [accounting.GaussianPhase(written["calibrated_noise_multiplier"], sample_rate, spec.steps)]
    assert len(written["results"]) == 8
    for entry in written["results"]:
        label = score_label(entry["canary"], entry["threat"], entry["noise"])
        with np.load(tmp_path / "audit" / "scores" / f"{label}.npz") as scores:
            result = dpaudit_mix.audit_scores(
                scores["in_scores"],
                scores["out_scores"],
                epsilon=spec.epsilon,
                delta=spec.delta,
                phases=phases,
                threshold=threshold,
                seed=spec.seed,
                label=label,
            )
        expected = {k: v for k, v in entry.items() if k not in ("canary", "threat", "noise")}
        assert json.loads(json.dumps(result.to_dict())) == expected
        assert result.gdp_is_bound == (sample_rate == 1.0)


def _scores(tmp_path: Path, shift: float, seed: int, per_class: int = 20_000) -> Path:
    rng = stream(seed, "simulated-scores", test="audit-scores", shift=shift).numpy()
    path = tmp_path / f"scores-{shift:g}-{seed}.npz"
    np.savez(path, in_scores=rng.normal(shift, 1, per_class), out_scores=rng.normal(0, 1, per_class))
    return path


def test_the_command_passes_an_honest_claim_and_flags_a_leak(capsys, tmp_path: Path) -> None:
    """Exact Gaussian scores at the claimed μ pass; at 1.5 μ they are flagged (bench/audit_scores.py
    measures the rates over 20 seeds)."""
    mu = accounting.gdp_mu_of_epsilon(1.0, DELTA)
    honest, leak = _scores(tmp_path, mu, 0), _scores(tmp_path, 1.5 * mu, 0)
    out = tmp_path / "report"
    assert main(["audit-scores", str(honest), "--epsilon", "1", "--delta", str(DELTA), "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert not printed["exceeds_claim"] and printed["runs"] == 40_000 and 0 < printed["epsilon_lower_bound"] <= 1
    assert {p.name for p in out.iterdir()} >= {"audit.json", "report.md", "report.html", "tradeoff.png"}
    assert main(["audit-scores", str(leak), "--epsilon", "1", "--delta", str(DELTA)]) == 3
    captured = capsys.readouterr()
    assert "VIOLATION" in captured.err and json.loads(captured.out)["profile_violation"]


def test_a_csv_gives_what_the_npz_gives(capsys, tmp_path: Path) -> None:
    path = _scores(tmp_path, 0.3, 1, per_class=300)
    with np.load(path) as data:
        rows = [f"{float(s)!r},1" for s in data["in_scores"]] + [f"{float(s)!r},0" for s in data["out_scores"]]
    csv = tmp_path / "scores.csv"
    csv.write_text("score,label\n" + "\n".join(rows) + "\n")
    assert main(["audit-scores", str(path), "--epsilon", "2", "--delta", str(DELTA)]) == 0
    from_npz = json.loads(capsys.readouterr().out)
    assert main(["audit-scores", str(csv), "--epsilon", "2", "--delta", str(DELTA)]) == 0
    assert json.loads(capsys.readouterr().out) == from_npz


@pytest.mark.parametrize(
    "content, message",
    [
        ({"in_scores": [1.0, np.nan, 2.0], "out_scores": [0.0, 1.0]}, "NaN or infinite"),
        ({"in_scores": [1.0], "out_scores": [0.0, 1.0]}, "at least 2 scores"),
        ({"in_scores": [1.0, 2.0]}, "lacks out_scores"),
        ("score,label\n1.0,1\n2.0,1\n", "scores labelled 0 needs at least 2"),
        ("value,member\n1.0,1\n", "needs the columns score and label"),
        ("score,label\n1.0,yes\n2.0,0\n", "label must be 1 (canary in) or 0"),
        ("score,label\nhigh,1\n2.0,0\n", "every score must be a number"),
    ],
)
def test_bad_scores_exit_2_with_one_line_and_nothing_written(capsys, tmp_path: Path, content, message: str) -> None:
    if isinstance(content, dict):
        path = tmp_path / "bad.npz"
        np.savez(path, **{k: np.asarray(v) for k, v in content.items()})
    else:
        path = tmp_path / "bad.csv"
        path.write_text(content)
    out = tmp_path / "out"
    assert main(["audit-scores", str(path), "--epsilon", "1", "--delta", str(DELTA), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not out.exists(), err


def test_a_partial_mechanism_is_refused(capsys, tmp_path: Path) -> None:
    path = _scores(tmp_path, 0.1, 2, per_class=10)
    assert main(["audit-scores", str(path), "--epsilon", "1", "--delta", str(DELTA), "--sample-rate", "0.1"]) == 2
    assert "--noise-multiplier, --sample-rate and --steps" in capsys.readouterr().err


def test_the_library_surface_is_small_and_lazy() -> None:
    """Every exported name resolves; importing the package loads neither torch nor the audit."""
    assert sorted(dpaudit_mix.__all__) == sorted(dpaudit_mix._HOMES)
    importlib.import_module("dpaudit_mix.mixmin")  # a module of the same name must not replace the function
    importlib.import_module("dpaudit_mix.verify.suite")
    assert all(callable(getattr(dpaudit_mix, name)) for name in dpaudit_mix.__all__)
    assert dpaudit_mix.mixmin.__module__ == "dpaudit_mix.mixmin" and dpaudit_mix.verify.__name__ == "verify"
    probe = (
        "import sys, dpaudit_mix; print(sorted(m for m in ('torch', 'scipy', 'dpaudit_mix.audit') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
