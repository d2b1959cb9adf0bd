import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix import cli, learner
from dpaudit_mix.cli import main
from dpaudit_mix.verification import checks
from dpaudit_mix.verification.checks import CHECKS, AuditPoint, Level, noise_conformance
from dpaudit_mix.verification.variants import HONEST, MUTANTS

#: the smallest level that still exercises every check (for the failure-path tests).
TINY = Level(
    name="tiny",
    grid=((1.0, 1.0, 10, 1e-5),),
    calibration_targets=(1.0,),
    calibration_settings=((1.0, 10),),
    monotone={"noise_multiplier": (1.0, 2.0), "steps": (10, 20), "sample_rate": (0.1, 0.2)},
    conformance=((2.0, 0.25, 10),),
    conformance_runs=1024,
    audits=(AuditPoint(2.0, 1.0, 10),),
    audit_runs=1000,
    dpsgd_audits=(),  # the failure-path tests break the learner; the DP-SGD checks cannot see it
    one_run_audits=(),
)


@pytest.mark.selftest
def test_quick_verification_passes_and_catches_every_mutant(capsys, tmp_path: Path) -> None:
    """The CI job itself: `verify-accountant --quick --self-test` on the shipped code."""
    junit = tmp_path / "verify.xml"
    assert main(["verify-accountant", "--quick", "--self-test", "--out", str(tmp_path), "--junit", str(junit)]) == 0
    suites = ET.fromstring(junit.read_text().split("\n", 1)[1]).findall("testsuite")
    assert [len(s.findall("testcase")) for s in suites] == [len(CHECKS), len(MUTANTS)]
    assert all(s.get("failures") == "0" for s in suites)
    summary = json.loads((tmp_path / "verify.json").read_text())
    assert summary["passed"] and [c["name"] for c in summary["checks"]] == [c.name for c in CHECKS]
    assert all(case["passed"] for c in summary["checks"] for case in c["cases"])
    st = summary["self_test"]
    assert st["kill_rate"] == 1.0 and {m["name"] for m in st["mutants"]} == {m.name for m in MUTANTS}
    caught_by = {m["name"]: m["caught_by"] for m in st["mutants"]}
    # a leak that is not about noise is seen by the empirical profile verdict alone
    assert caught_by["loose_clipping"] == ["empirical_soundness"]
    assert "empirical_soundness" in caught_by["sigma_halved"] and "empirical_soundness" in caught_by["pld_half_steps"]
    # the pipeline's DP-SGD mutants, each by the audit of the mechanism it breaks
    assert caught_by["fixed_size_batches"] == ["empirical_opacus"]
    assert caught_by["per_window_clipping"] == ["empirical_user_dpsgd"]
    # a σ the optimizer really adds is seen from one run too (100,000 canaries at q = 1)
    assert caught_by["opacus_sigma_halved"] == ["empirical_opacus", "one_run_opacus"]
    # the field's bugs: a negative ε at the tiny-q corner, AdaClip's σ_eff told to the accountant
    assert "cross_accountant" in caught_by["prv_lower_estimate"]
    assert "noise_conformance" in caught_by["sigma_eff_told"]
    assert "PASS" in (tmp_path / "verify.md").read_text().splitlines()[0]


@pytest.mark.parametrize(
    "mutant", [m for m in MUTANTS if m.name in ("partial_noise", "realised_normaliser")], ids=lambda m: m.name
)
def test_broken_learner_in_the_package_fails_verification(capsys, monkeypatch, tmp_path: Path, mutant) -> None:
    """A bug shipped in the learner itself (not a variant the self-test names) makes the CLI exit 3."""
    monkeypatch.setattr(checks, "QUICK", TINY)  # the CLI reads it when the command runs
    monkeypatch.setattr(learner, "SHIPPED", mutant.privatiser)
    assert main(["verify-accountant", "--quick", "--out", str(tmp_path)]) == cli.EXIT_VIOLATION
    err = capsys.readouterr().err
    assert "verification FAILED" in err and "noise_conformance" in err
    summary = json.loads((tmp_path / "verify.json").read_text())
    assert not summary["passed"]


def test_a_learner_mutant_changes_what_the_learner_releases_and_nothing_else() -> None:
    """The self-test's premise: a learner mutant's DP step releases another λ from the same seeded
    fit, while the shipped fit (the package, untouched) releases what it always did."""
    from dpaudit_mix.base.randomness import stream

    from .conftest import random_problem

    problem = random_problem(40, 4, seed=7)
    config = learner.LearnerConfig(steps=5, clip=0.05, noise_multiplier=1.0, sample_rate=0.5)  # clipping binds

    def released(privatiser: learner.Privatiser | None = None) -> np.ndarray:
        return learner.fit(
            problem, config, 2, stream(0, "verify-conformance", test="mutants"), privatiser=privatiser
        ).weights

    shipped = released()
    in_learner = [m for m in MUTANTS if m.privatiser is not None]
    assert len(in_learner) >= 4
    for mutant in in_learner:
        assert not np.allclose(released(mutant.privatiser), shipped), mutant.name
        assert np.array_equal(released(), shipped), mutant.name


def test_noise_conformance_statistic_is_standard_normal_for_the_shipped_learner() -> None:
    """The probe's whitened log λ has unit variance in every direction (up to sampling error)."""
    result = noise_conformance(HONEST, TINY)
    case = result.cases[0]
    assert result.passed and abs(case["variance_ratio_pooled"] - 1) < 5 * np.sqrt(2 / (1024 * 15))
