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
from dpaudit_mix.audit.many_run.engine import run_audit, score_label
from dpaudit_mix.audit.many_run.report import write_report
from dpaudit_mix.audit.many_run.score_file import read_scores
from dpaudit_mix.audit.many_run.words import verdict_line
from dpaudit_mix.audit.spec import AuditSpec
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, save

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
                confidence=written["confidence_per_result"],
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
    assert main(["audit-scores", str(leak), "--epsilon", "1", "--delta", str(DELTA), "--curve", "gdp"]) == 3
    captured = capsys.readouterr()
    assert "VIOLATION" in captured.err and json.loads(captured.out)["profile_violation"]
    # without phases or --curve the claim is (ε, δ) alone: the GDP curve is a comparison, the verdict the strict bound's
    code = main(["audit-scores", str(leak), "--epsilon", "1", "--delta", str(DELTA)])
    alone = json.loads(capsys.readouterr().out)
    assert alone["curve"] == "none" and not alone["profile_violation"]
    # the Gaussian reading of an unstated mechanism is no bound: under diagnostics, labelled, not at the top
    reading = alone["diagnostics"]["gdp_reading"]
    assert reading["gdp_comparison"] and "not_a_bound" in alone["diagnostics"]["gdp_reading"]
    assert "epsilon_lower_bound_gdp" not in alone and "mu_lower_bound" not in alone
    assert code == (3 if alone["epsilon_violation"] else 0) and alone["exceeds_claim"] == alone["epsilon_violation"]


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
        ("value,member\n1.0,1\n", "needs exactly one 'score' column"),
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
    importlib.import_module("dpaudit_mix.optimum")  # no module shares an exported name
    importlib.import_module("dpaudit_mix.verification.suite")
    assert all(callable(getattr(dpaudit_mix, name)) for name in dpaudit_mix.__all__)
    assert dpaudit_mix.mixmin.__module__ == "dpaudit_mix.optimum" and dpaudit_mix.verify.__name__ == "verify"
    probe = (
        "import sys, dpaudit_mix; print(sorted(m for m in ('torch', 'scipy', 'dpaudit_mix.audit') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def _draw(name: str, **ids: object) -> np.random.Generator:
    return stream(0, "simulated-scores", test=name, **ids).numpy()


def test_the_stated_epsilon_must_be_what_the_phases_spend() -> None:
    """One claim: ε = 1 with phases worth ε ≈ 100, or ε = 50 with phases worth 1.8, is refused."""
    rng = _draw("claim")
    scores = rng.normal(0, 1, 100), rng.normal(0, 1, 100)
    for epsilon, phase in (
        (1.0, accounting.GaussianPhase(0.3, 0.1, 100)),
        (50.0, accounting.GaussianPhase(1, 0.01, 1000)),
    ):
        with pytest.raises(ValueError, match="is not what the phases spend"):
            dpaudit_mix.audit_scores(*scores, epsilon=epsilon, delta=DELTA, phases=[phase])
    honest = accounting.GaussianPhase(accounting.calibrate(1.0, DELTA, 0.1, 100), 0.1, 100)
    assert not dpaudit_mix.audit_scores(*scores, epsilon=1.0, delta=DELTA, phases=[honest]).gdp_is_bound


def test_gaussian_numbers_are_a_bound_only_when_full_batch_is_stated() -> None:
    rng = _draw("gdp-label")
    scores = rng.normal(0.2, 1, 500), rng.normal(0, 1, 500)
    assert not dpaudit_mix.audit_scores(*scores, epsilon=1.0, delta=DELTA).gdp_is_bound
    full = accounting.GaussianPhase(accounting.calibrate(1.0, DELTA, 1.0, 10), 1.0, 10)
    assert dpaudit_mix.audit_scores(*scores, epsilon=1.0, delta=DELTA, phases=[full]).gdp_is_bound


def test_a_blind_attack_is_inconclusive_and_a_flipped_one_is_warned() -> None:
    """σ = 0 control scores that the attack cannot tell apart make the result inconclusive; a
    control that leaks plainly does not; an AUROC below ½ is warned about."""
    rng = _draw("blind")
    weak = rng.normal(0.05, 1, 2000), rng.normal(0, 1, 2000)
    blind = dpaudit_mix.audit_scores(*weak, epsilon=1.0, delta=DELTA, control_in=weak[0], control_out=weak[1])
    assert blind.inconclusive and not blind.violation and blind.to_dict()["inconclusive"]
    seen = rng.normal(8, 1, 2000), rng.normal(0, 1, 2000)
    sighted = dpaudit_mix.audit_scores(*weak, epsilon=1.0, delta=DELTA, control_in=seen[0], control_out=seen[1])
    assert not sighted.inconclusive and sighted.control is not None and sighted.control.violation
    flipped = dpaudit_mix.audit_scores(rng.normal(-1, 1, 2000), rng.normal(0, 1, 2000), epsilon=1.0, delta=DELTA)
    assert flipped.auroc < 0.5 and any("below 1/2" in w for w in flipped.warnings)
    with pytest.raises(ValueError, match="together"):
        dpaudit_mix.audit_scores(*weak, epsilon=1.0, delta=DELTA, control_in=weak[0])


def test_the_power_line_is_the_bound_of_an_error_free_attack() -> None:
    """epsilon_lower_bound_max is what perfectly separated scores certify; 20 runs cannot fail at all."""
    rng = _draw("power")
    separated = dpaudit_mix.audit_scores(rng.normal(50, 1, 1000), rng.normal(0, 1, 1000), epsilon=1.0, delta=DELTA)
    assert separated.epsilon_lower_bound == pytest.approx(separated.epsilon_lower_bound_max)
    few = dpaudit_mix.audit_scores(rng.normal(50, 1, 10), rng.normal(0, 1, 10), epsilon=1.0, delta=DELTA)
    assert not few.curve_detectable and not few.violation and any("cannot fail" in w for w in few.warnings)


def test_the_command_takes_control_scores_and_exits_4_when_blind(capsys, tmp_path: Path) -> None:
    rng = _draw("blind-cli")
    path = tmp_path / "s.npz"
    same = {k: rng.normal(0, 1, 500) for k in ("in_scores", "out_scores", "control_in", "control_out")}
    np.savez(path, **same)
    assert main(["audit-scores", str(path), "--epsilon", "1", "--delta", str(DELTA)]) == 4
    assert "INCONCLUSIVE" in capsys.readouterr().err


def test_other_dp_mechanisms_fail_the_curve_not_epsilon() -> None:
    """Mechanisms that are (ε, δ)-DP but not the claimed Gaussian: a plain Gaussian exactly
    (1, 1e-5)-DP against a Poisson claim of the same (1, 1e-5), the Laplace mechanism and
    randomized response at pure ε = 1. The curve test may fire where a curve is claimed (it tests
    the mechanism); without one, the GDP curve is a comparison only; the strict bound never says
    ε is violated."""
    rng = _draw("other-mechanisms")
    n = 100_000
    mu = accounting.gdp_mu_of_epsilon(1.0, DELTA)
    poisson = accounting.GaussianPhase(accounting.calibrate(1.0, DELTA, 0.01, 100), 0.01, 100)
    keep = 1 / (1 + np.e)  # randomized response: report the bit flipped with probability 1/(1 + e^ε)
    cases = [
        (rng.normal(mu, 1, n), rng.normal(0, 1, n), [poisson]),
        (rng.laplace(1, 1, n), rng.laplace(0, 1, n), None),
        ((rng.random(n) > keep).astype(float), (rng.random(n) < keep).astype(float), None),
    ]
    for scores_in, scores_out, phases in cases:
        result = dpaudit_mix.audit_scores(scores_in, scores_out, epsilon=1.0, delta=DELTA, phases=phases)
        assert not result.epsilon_violation and result.epsilon_lower_bound <= 1.0
        assert result.verdict in ("curve_violated", "none") and not result.gdp_is_bound
    gaussian = dpaudit_mix.audit_scores(cases[0][0], cases[0][1], epsilon=1.0, delta=DELTA, phases=[poisson])
    laplace = dpaudit_mix.audit_scores(cases[1][0], cases[1][1], epsilon=1.0, delta=DELTA, curve="gdp")
    assert gaussian.verdict == laplace.verdict == "curve_violated"
    assert "(curve violated)" in verdict_line(laplace, 1.0) and "(ε violated)" not in verdict_line(laplace, 1.0)
    unstated = dpaudit_mix.audit_scores(cases[1][0], cases[1][1], epsilon=1.0, delta=DELTA)
    assert unstated.verdict == "none" and not unstated.violation and unstated.gdp_comparison
    assert "not a violation" in verdict_line(unstated, 1.0)


@pytest.mark.parametrize(
    "text, message",
    [
        ("score,label,score\n1,1,5\n2,0,6\n3,1,7\n4,0,8\n", "exactly one 'score' column, found 2"),
        ("score,label\n1,1\n2\n3,0\n4,1\n", "line 3 has not 2 fields"),
    ],
)
def test_a_csv_is_read_by_its_one_header(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "s.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_scores(path)


@pytest.mark.parametrize("case", ["all equal", "identical sets"])
def test_scores_that_carry_no_information_are_one_warning_and_inconclusive(case: str, tmp_path: Path, capsys) -> None:
    rng = _draw("no-information", case=case)
    scores = rng.normal(size=2000)
    in_scores, out_scores = (
        (np.zeros(2000), np.zeros(2000)) if case == "all equal" else (scores, rng.permutation(scores))
    )
    result = dpaudit_mix.audit_scores(in_scores, out_scores, epsilon=1.0, delta=DELTA)
    assert result.no_information and result.inconclusive and not result.violation
    assert result.to_dict()["inconclusive"] and result.warnings[0].startswith("the scores carry no information")
    path = tmp_path / "blind.npz"
    np.savez(path, in_scores=in_scores, out_scores=out_scores)
    assert main(["audit-scores", str(path), "--epsilon", "1", "--delta", str(DELTA)]) == 4
    err = capsys.readouterr().err
    assert "dpaudit-mix: warning: the scores carry no information; the attack sees nothing" in err
    assert "INCONCLUSIVE" not in err  # one line says it
    # one score moved: information, however little
    moved = in_scores.copy()
    moved[0] += 1e-6
    assert not dpaudit_mix.audit_scores(moved, out_scores, epsilon=1.0, delta=DELTA).no_information


def test_the_command_names_the_accountant_behind_the_claimed_epsilon(capsys, tmp_path: Path) -> None:
    """With phases the claimed ε is an accountant's figure, named in the JSON and in a line (by
    its registered name and its library); without phases the line says the ε is as stated."""
    path = _scores(tmp_path, accounting.gdp_mu_of_epsilon(1.0, DELTA), 0)
    for accountant, library in (("pld", "dp_accounting's PLD"), ("rdp", "Opacus' RDP")):
        sigma = accounting.calibrate(1.0, DELTA, 1.0, 1, accountant)
        spent = accounting.epsilon([accounting.GaussianPhase(sigma, 1.0, 1)], DELTA, accountant)
        phases = ["--noise-multiplier", repr(sigma), "--sample-rate", "1", "--steps", "1", "--accountant", accountant]
        assert main(["audit-scores", str(path), "--epsilon", f"{spent!r}", "--delta", str(DELTA), *phases]) == 0
        captured = capsys.readouterr()
        said = json.loads(captured.out)["accounted"]
        assert said["accountant"] == accountant and said["accounted_epsilon"] == pytest.approx(spent)
        assert f"accounted by {accountant} ({library}): ε = {spent:.4g} for the phases" in captured.err
    assert main(["audit-scores", str(path), "--epsilon", "1", "--delta", str(DELTA)]) == 0
    assert "claimed ε = 1 at δ = 1e-05 as stated (no phases" in capsys.readouterr().err


def test_a_result_prints_as_one_line() -> None:
    """``print(result)`` is :meth:`AuditResult.summary`: verdict, ε_LB against the claim, power."""
    rng = stream(0, "simulated-scores", test="summary").numpy()
    mu = accounting.gdp_mu_of_epsilon(1.0, DELTA)
    honest = dpaudit_mix.audit_scores(rng.normal(mu, 1, 2000), rng.normal(0, 1, 2000), epsilon=1.0, delta=DELTA)
    line = str(honest)
    assert line == honest.summary() and "\n" not in line
    assert line.startswith("no violation: ε_LB ") and "against the claimed ε 1 at δ 1e-05, from 4000 runs" in line
    assert honest.power is not None and f"catches σ/{honest.power.detects:g}" in line
    leak = dpaudit_mix.audit_scores(rng.normal(4 * mu, 1, 2000), rng.normal(0, 1, 2000), epsilon=1.0, delta=DELTA)
    assert str(leak).startswith("VIOLATION (ε violated): ε_LB ")
