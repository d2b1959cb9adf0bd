"""The release gate: honest releases pass and re-verify; leaks, tampering and budget are refused."""

import json
from pathlib import Path

import dp_accounting
import pytest

from dpaudit_mix import accounting, learner
from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, save
from dpaudit_mix.release import gate, ledger

from .conftest import random_problem
from .test_verify import TINY

EPS, DELTA, STEPS = 1.0, 1e-5, 10


@pytest.fixture(autouse=True)
def tiny_verification(monkeypatch) -> None:
    monkeypatch.setattr(gate, "VERIFY_LEVEL", TINY)


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    prob = random_problem(80, 4, seed=7)
    path = tmp_path / "p.npz"
    save(Problem(prob.logp, prob.sources, heldout_logp=random_problem(10, 4, seed=8).logp, task="t"), path)
    return path


def write_spec(tmp_path: Path, problem_file: Path, name: str = "spec.toml", **keys) -> Path:
    base = {
        "problem": str(problem_file),
        "epsilon": EPS,
        "delta": DELTA,
        "steps": STEPS,
        "audit_runs": 2000,
        "chunk_size": 1024,
        "ledger": str(tmp_path / "ledger.json"),
        **keys,
    }
    path = tmp_path / name
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in base.items()))
    return path


def holds_weights(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and b"weights" in p.read_bytes()]


def test_honest_release_passes_and_checks(tmp_path: Path, problem_file: Path, capsys) -> None:
    out = tmp_path / "r"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 0
    manifest = json.loads((out / "release.json").read_text())
    assert len(manifest["weights"]) == 4 and abs(sum(manifest["weights"]) - 1) < 1e-9
    assert set(manifest["claim"]["epsilon_by_accountant"]) == set(accounting.ACCOUNTANTS)
    assert manifest["audit"]["violation"] is False and manifest["verification"]["passed"]
    assert {r["canary"] for r in manifest["audit"]["results"]} == {"max_clip", "natural"}
    assert manifest["manifest_sha256"] == gate.manifest_digest(manifest)
    for name in ("release.md", "release.html", "lambda.png"):
        assert (out / name).stat().st_size > 0
    assert not (out / "refused.json").exists()
    capsys.readouterr()
    assert main(["check-release", str(out / "release.json")]) == 0


def test_tampering_is_detected(tmp_path: Path, problem_file: Path, capsys) -> None:
    out = tmp_path / "r"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 0
    manifest_path = out / "release.json"
    original = manifest_path.read_text()
    edited = json.loads(original)
    edited["claim"]["noise_multiplier"] *= 1.0001  # one number
    manifest_path.write_text(json.dumps(edited))
    assert main(["check-release", str(manifest_path)]) == 3
    assert "manifest_sha256" in capsys.readouterr().err
    manifest_path.write_text(original)
    data = bytearray(problem_file.read_bytes())
    data[len(data) // 2] ^= 1  # one byte of the problem file
    problem_file.write_bytes(bytes(data))
    assert main(["check-release", str(manifest_path)]) == 3
    assert "sha256" in capsys.readouterr().err


def test_a_2x_leak_is_refused_and_leaves_no_weights(tmp_path: Path, problem_file: Path, capsys) -> None:
    sigma = accounting.calibrate(EPS, DELTA, 1.0, STEPS)
    out = tmp_path / "leak"
    spec = write_spec(tmp_path, problem_file)
    assert main(["release", str(spec), "--out", str(out), "--noise-multiplier", str(sigma / 2)]) == 3
    captured = capsys.readouterr()
    assert "REFUSED (audit)" in captured.err and "weights" not in captured.out
    assert json.loads((out / "refused.json").read_text())["stage"] == "audit"
    assert not (out / "release.json").exists() and holds_weights(out) == []
    assert ledger.read(tmp_path / "ledger.json") == []  # the reservation was withdrawn: nothing was spent


def test_a_patched_learner_is_refused(tmp_path: Path, problem_file: Path, monkeypatch, capsys) -> None:
    shipped = learner._noise_scale
    monkeypatch.setattr(learner, "_noise_scale", lambda sigma_clip, k: shipped(sigma_clip, k) / 2)
    out = tmp_path / "patched"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 3
    assert "REFUSED" in capsys.readouterr().err
    assert holds_weights(out) == [] and (out / "refused.json").exists()


def test_ledger_composes_in_pld_and_enforces_the_budget(tmp_path: Path, problem_file: Path, capsys) -> None:
    spec = write_spec(tmp_path, problem_file, budget_epsilon=1.2)
    assert main(["release", str(spec), "--out", str(tmp_path / "first")]) == 0
    assert main(["release", str(spec), "--out", str(tmp_path / "second")]) == 3
    assert "REFUSED (budget)" in capsys.readouterr().err
    assert json.loads((tmp_path / "second" / "refused.json").read_text())["stage"] == "budget"
    entries = ledger.read(tmp_path / "ledger.json")
    assert len(entries) == 1 and entries[0].status == "released"
    manifest = json.loads((tmp_path / "first" / "release.json").read_text())
    assert entries[0].manifest_sha256 == manifest["manifest_sha256"] == gate.manifest_digest(manifest)
    sigma = entries[0].noise_multiplier
    pld = dp_accounting.pld.PLDAccountant()
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), STEPS)
    pld.compose(dp_accounting.ComposedDpEvent([event, event]))
    phase = accounting.GaussianPhase(sigma, 1.0, STEPS)
    composed = ledger.spent(entries, entries[0].data_sha256, "", DELTA, (phase,))
    assert composed == pytest.approx(pld.get_epsilon(DELTA), rel=1e-9) and composed > 1.2


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"epsilon": -1.0}, "epsilon"),
        ({"audit_canaries": ["golden"]}, "audit_canaries"),
        ({"accountant": "magic"}, "accountant"),
        ({"budget_epsilon": 0.5}, "budget_epsilon"),
        ({"problem": "/no/such.npz"}, "neither an embedded problem"),
    ],
)
def test_bad_release_specs_exit_2(tmp_path: Path, problem_file: Path, capsys, keys: dict, message: str) -> None:
    out = tmp_path / "bad"
    assert main(["release", str(write_spec(tmp_path, problem_file, **keys)), "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert holds_weights(out) == [] and json.loads((out / "refused.json").read_text())["exit_code"] == 2


def test_check_release_on_garbage(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "release.json"
    bad.write_text("{not json")
    assert main(["check-release", str(bad)]) == 2
    assert main(["check-release", str(tmp_path / "missing.json")]) == 2
