import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, save

from .conftest import random_problem


@pytest.fixture
def problem_file(tmp_path: Path, small_problem: Problem) -> Path:
    path = tmp_path / "p.npz"
    save(Problem(small_problem.logp, small_problem.sources, users=np.arange(small_problem.n) // 4), path)
    return path


def run(capsys, *argv: str) -> tuple[int, dict | None, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def test_mix_nonprivate_and_private(capsys, problem_file: Path, tmp_path: Path) -> None:
    code, star, _ = run(capsys, "mix", "--problem", str(problem_file), "--nonprivate")
    assert code == 0 and set(star) >= {"sources", "weights", "loss", "epsilon", "delta", "noise_multiplier"}
    assert len(star["weights"]) == 5 and star["epsilon"] is None
    out = tmp_path / "mix.json"
    code, dp, _ = run(
        capsys,
        "mix",
        "--problem",
        str(problem_file),
        "--epsilon",
        "2",
        "--delta",
        "1e-5",
        "--runs",
        "3",
        "--steps",
        "20",
        "--user-level",
        "--out",
        str(out),
    )
    assert code == 0 and np.array(dp["weights"]).shape == (3, 5) and len(dp["loss"]) == 3
    assert dp["epsilon_by_accountant"]["pld"] <= 2.0 and dp["noise_multiplier"] > 0
    assert json.loads(out.read_text()) == {key: value for key, value in dp.items() if key != "out"}
    assert dp["learner"] == {"clip": 3.0, "learning_rate": 1.0, "tuned": False}


def test_a_private_mix_at_high_epsilon_says_its_untuned_learner_biases_lambda(capsys, problem_file: Path) -> None:
    argv = ["mix", "--problem", str(problem_file), "--delta", "1e-5", "--steps", "20", "--clip", "2"]
    code, _, err = run(capsys, *argv, "--epsilon", "2")
    assert code == 0 and "bias lambda" not in err
    code, dp, err = run(capsys, *argv, "--epsilon", "100")
    assert code == 0 and dp["learner"]["clip"] == 2.0 and not dp["learner"]["tuned"]
    line = "dpaudit-mix: warning: at epsilon 100 the learner's C = 2 and eta = 1 (untuned) bias lambda"
    assert err.count("\n") == 1 and err.startswith(line)


@pytest.fixture
def public_file(tmp_path: Path, small_problem: Problem) -> Path:
    """A public problem with the private one's sources (other rows of the same kind)."""
    path = tmp_path / "pub.npz"
    other = random_problem(400, 5, seed=12)
    save(Problem(other.logp, small_problem.sources, task="public"), path)
    return path


def test_mix_tune_on_rehearses_c_and_eta_on_public_rows_and_says_so(capsys, problem_file, public_file) -> None:
    from dpaudit_mix.tuning import WIDE_CLIPS, WIDE_LEARNING_RATES

    argv = ["mix", "--problem", str(problem_file), "--epsilon", "100", "--delta", "1e-5", "--steps", "10"]
    code, dp, err = run(capsys, *argv, "--tune-on", str(public_file), "--seed", "3")
    learner = dp["learner"]
    assert code == 0 and learner["tuned"] and "bias lambda" not in err
    assert learner["clip"] in WIDE_CLIPS and learner["learning_rate"] in WIDE_LEARNING_RATES
    assert learner["tuned_on"] == {"task": "public", "rows": 300, "rehearsal_seed": 3}  # cut to the private n
    code, again, _ = run(capsys, *argv, "--tune-on", str(public_file), "--seed", "3")
    assert again == dp  # same seed, same rehearsal and fit
    code, secure, _ = run(capsys, *argv, "--tune-on", str(public_file))
    assert code == 0 and secure["noise"] == "csprng" and secure["learner"]["tuned_on"]["rehearsal_seed"] >= 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("clip", "do not also give --clip"),
        ("sources", "are not the private problem's"),
        ("sensitive", "was built on a sensitive set"),
        ("user-level", "does not take --user-level"),
    ],
)
def test_mix_tune_on_refuses_what_is_not_a_public_twin(capsys, tmp_path, problem_file, public_file, change, message):
    from dpaudit_mix.base.identity import META_KEY
    from dpaudit_mix.problem import load

    public = load(public_file)
    if change == "sources":
        save(Problem(public.logp, tuple(f"other-{s}" for s in public.sources)), public_file)
    if change == "sensitive":
        save(Problem(public.logp, public.sources, meta={META_KEY: "ab" * 32}), public_file)
    extra = {"clip": ["--clip", "2"], "user-level": ["--user-level"]}.get(change, [])
    out = tmp_path / "out.json"
    argv = ["mix", "--problem", str(problem_file), "--epsilon", "1", "--delta", "1e-5", "--tune-on", str(public_file)]
    code, _, err = run(capsys, *argv, *extra, "--out", str(out))
    assert code == 2 and message in err and err.count("\n") == 1 and not out.exists()


def test_account_and_calibrate(capsys) -> None:
    code, acc, _ = run(
        capsys, "account", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "100", "--delta", "1e-5"
    )
    assert code == 0 and set(acc["epsilon"]) == {"rdp", "prv", "pld"}
    code, cal, _ = run(capsys, "calibrate", "--epsilon", "1", "--delta", "1e-5", "--sample-rate", "1", "--steps", "10")
    assert code == 0 and cal["noise_multiplier"] > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["calibrate", "--epsilon", "0", "--delta", "1e-5", "--sample-rate", "1", "--steps", "10"], "epsilon"),
        (["calibrate", "--epsilon", "1", "--delta", "1", "--sample-rate", "1", "--steps", "10"], "delta"),
        (["calibrate", "--epsilon", "1", "--delta", "1e-5", "--sample-rate", "0", "--steps", "10"], "sample rate"),
        (["account", "--noise-multiplier", "1", "--sample-rate", "1", "--steps", "0", "--delta", "1e-5"], "steps"),
        (
            ["account", "--noise-multiplier", "x", "--sample-rate", "1", "--steps", "1", "--delta", "1e-5"],
            "expected a number",
        ),
        (["mix", "--problem", "PROBLEM", "--epsilon", "1"], "--delta"),
        (["mix", "--problem", "PROBLEM", "--epsilon", "1", "--delta", "1e-5", "--clip", "0"], "clipping"),
        (["mix", "--problem", "/no/such/file.npz", "--nonprivate"], "not found"),
        (["problem", "nosuch", "--out", "OUT"], "unknown problem"),
        (["problem", "mnist", "--task", "digit-42", "--out", "OUT"], "unknown task"),
        (["problem", "mnist-shift", "--proxy", "vit", "--out", "OUT"], "invalid choice: 'vit'"),
        (["problem", "mnist-shift", "--proxy", "cnn", "--proxy-epochs", "0", "--out", "OUT"], "must be >= 1"),
        (["problem", "mnist-shift", "--proxy-epochs", "3", "--out", "OUT"], "applies to cnn proxies only"),
        (["problem", "shakespeare-users", "--public", "--out", "OUT"], "is no image world"),
        (
            ["problem", "shakespeare-users", "--proxy", "cnn", "--out", "OUT"],
            "applies to the image worlds (mnist-labels, mnist-shift, fashion-shift)",
        ),
    ],
)
def test_bad_input_exits_2_without_output(capsys, problem_file: Path, tmp_path: Path, argv, message) -> None:
    out = tmp_path / "out.json"
    argv = [str(problem_file) if a == "PROBLEM" else str(out) if a == "OUT" else a for a in argv]
    code, _, err = run(capsys, *argv, *(["--out", str(out)] if argv[0] == "mix" else []))
    assert code == 2
    assert message in err and err.count("\n") == 1
    assert not out.exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_corrupt_problem_file(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    np.savez(bad, logp=np.array([[0.2, -1.0]]), sources=np.array(["a", "b"]))
    code, _, err = run(capsys, "mix", "--problem", str(bad), "--nonprivate")
    assert code == 2 and "positive log-likelihood" in err


def test_the_command_line_starts_without_the_heavy_libraries() -> None:
    """`--help` and argument errors stay fast: importing the CLI loads no scipy, torch, opacus,
    dp_accounting, pandas or matplotlib (each command imports what it needs when it runs)."""
    import subprocess
    import sys

    heavy = ("scipy", "torch", "opacus", "dp_accounting", "pandas", "matplotlib", "sklearn", "statsmodels")
    code = f"import sys, dpaudit_mix.cli; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_the_entry_point_starts_light_commands_with_one_blas_thread() -> None:
    """`dpaudit-mix` (dpaudit_mix.__main__) chooses the BLAS thread count before numpy loads."""
    import os
    import subprocess
    import sys

    from dpaudit_mix.__main__ import light

    assert light(["bound", "--fp", "1"]) and light(["--help"]) and light(["pipeline", "spec.toml", "-h"]) and light([])
    assert not light(["pipeline", "spec.toml"]) and not light(["--json", "mix", "--problem", "p.npz"])
    probe = (
        "import os, sys; sys.argv = ['dpaudit-mix', 'bound', '--fp', '1', '--fn', '1', '--negatives', '10', "
        "'--positives', '10', '--delta', '1e-5']; from dpaudit_mix.__main__ import main; code = main(); "
        "print(os.environ.get('OPENBLAS_NUM_THREADS'), code)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    assert ran.stdout.strip().splitlines()[-1] == "1 0", ran.stderr
    shown = subprocess.run([sys.executable, "-m", "dpaudit_mix", "--help"], capture_output=True, text=True, check=False)
    assert shown.returncode == 0 and "export-world" in shown.stdout
