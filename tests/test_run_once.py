"""An audit spec's one-run mode (audit/run_once.py, audit/mechanisms/once.py): the real SmallCNN
finetune and the text track's user-level step, each trained once with many canaries."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix import accounting, cli
from dpaudit_mix.audit.mechanisms import MECHANISMS, register_mechanism
from dpaudit_mix.audit.mechanisms.base import RunPlan, Setting
from dpaudit_mix.audit.run_once import membership, run_one_run_audit
from dpaudit_mix.audit.spec import AuditSpec
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.problem import save
from dpaudit_mix.verification.checks import dpsgd_probe_problem

#: a small SmallCNN finetune: 240 mnist images, 5 batches per epoch, 2 epochs, 400 canaries
#: (at q = 1/5, Opacus calibrates σ in a second; at q = 1/2 it takes five).
OPACUS = dict(
    mechanism="opacus",
    problem="mnist",
    task="digit-0",
    epsilon=2.0,
    rho=0.1,
    sample_rate=0.2,
    steps=10,
    clip=1.0,
    learning_rate=0.1,
    canaries=("max_clip",),
    one_run=True,
    one_run_canaries=400,
)


def _user_spec(**overrides: object) -> AuditSpec:
    keys: dict[str, object] = dict(
        mechanism="user-dpsgd",
        problem="probe",
        task="probe",
        user_level=True,
        epsilon=2.0,
        rho=1.0,
        sample_rate=0.5,
        steps=8,
        clip=1.0,
        learning_rate=0.01,
        canaries=("max_clip",),
        one_run=True,
        one_run_canaries=1000,
    )
    return AuditSpec(**{**keys, **overrides})  # type: ignore[arg-type]


def _plan(collect: object, spec: AuditSpec) -> RunPlan:
    """A one-run plan whose claim is full-batch Gaussian noise calibrated to the spec's ε."""
    sigma = accounting.calibrate(spec.epsilon, spec.delta, 1.0, 1)
    return RunPlan(collect, (accounting.GaussianPhase(sigma, 1.0, 1),), sigma, {"name": "x", "task": "y"}, {}, False)


def test_the_smallcnn_finetune_audited_in_one_run_passes_and_its_control_sees(tmp_path: Path) -> None:
    spec = AuditSpec(**OPACUS)  # type: ignore[arg-type]
    outcome = run_one_run_audit(spec, tmp_path)
    summary = outcome.summary
    assert not summary.violation and not summary.inconclusive
    assert summary.problem["model"] == "SmallCNN" and summary.problem["examples"] == 240
    controls = {r.threat: r.result for r in summary.results if not r.noise}
    assert all(r.violation for r in controls.values())
    # σ = 0: a member's white-box score counts the steps it was sampled in, a non-member's is 0
    hits = outcome.scores[("white_box", False)]
    member = outcome.membership
    assert np.all(hits[~member] == 0) and np.allclose(hits, np.round(hits), atol=1e-4)
    assert abs(hits[member].mean() - 2.0) < 0.2  # q T = 2 expected hits
    assert np.array_equal(member, membership(spec)) and 150 < member.sum() < 250


def test_the_user_level_step_with_canary_users_passes_and_a_leak_is_flagged(tmp_path: Path) -> None:
    honest = run_one_run_audit(_user_spec(), tmp_path / "honest", problem=dpsgd_probe_problem())
    assert not honest.summary.violation and not honest.summary.inconclusive
    assert honest.summary.canaries["max_clip"]["canaries"] == 1000
    sigma = honest.summary.calibrated_noise_multiplier
    leaky = run_one_run_audit(
        _user_spec(), tmp_path / "leaky", noise_multiplier=sigma / 5, problem=dpsgd_probe_problem()
    )
    assert leaky.summary.violation
    assert leaky.summary.calibrated_noise_multiplier == sigma  # the claim stays the calibrated one


def test_a_one_run_audit_resumes_from_its_finished_runs(tmp_path: Path) -> None:
    calls: list[bool] = []

    class Counted:
        def one_run(self, spec, full, data, noise_multiplier):
            def collect(setting: Setting, member: np.ndarray) -> dict[str, np.ndarray]:
                calls.append(setting.noise)
                scores = member.astype(float) * (10.0 if not setting.noise else 0.0)
                return {"white_box": scores, "black_box": scores}

            return _plan(collect, spec)

        def plan(self, *args: object) -> None:
            raise AssertionError("a one-run audit does not plan runs")

    register_mechanism("test-counted", Counted())
    try:
        spec = _user_spec(mechanism="test-counted", user_level=False, epsilon=1.0)
        first = run_one_run_audit(spec, tmp_path, problem=dpsgd_probe_problem())
        second = run_one_run_audit(spec, tmp_path, problem=dpsgd_probe_problem())
    finally:
        MECHANISMS.unregister("test-counted")
    assert calls == [True, False]  # the second audit reused both runs
    assert first.summary.to_dict() == second.summary.to_dict()


def test_a_blind_control_makes_the_one_run_audit_inconclusive_exit_4(tmp_path: Path, capsys) -> None:
    class Blind:
        def one_run(self, spec, full, data, noise_multiplier):
            def collect(setting: Setting, member: np.ndarray) -> dict[str, np.ndarray]:
                return {t: np.arange(len(member), dtype=float) for t in ("white_box", "black_box")}

            return _plan(collect, spec)

        def plan(self, *args: object) -> None:
            raise AssertionError

    register_mechanism("test-blind", Blind())
    try:
        save(dpsgd_probe_problem(), tmp_path / "probe.npz")
        path = tmp_path / "spec.toml"
        path.write_text(
            f'mechanism = "test-blind"\nproblem = "{tmp_path / "probe.npz"}"\ntask = "probe"\none_run = true\n'
            "one_run_canaries = 100\n"
        )
        code = cli.main(["audit", str(path), "--out", str(tmp_path / "out")])
    finally:
        MECHANISMS.unregister("test-blind")
    assert code == cli.EXIT_INCONCLUSIVE
    assert "INCONCLUSIVE" in capsys.readouterr().err
    report = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert report["one_run"] and report["inconclusive"] and len(report["blind_controls"]) == 2
    page = (tmp_path / "out" / "report.md").read_text()
    assert "![" in page and "canary_scores.png" in page  # the members' and non-members' histograms, drawn
    assert (tmp_path / "out" / "canary_scores.png").stat().st_size > 10_000
    saved = np.load(tmp_path / "out" / "scores" / "max_clip-white_box-private.npz")
    assert set(saved.files) == {"scores", "membership"} and len(saved["scores"]) == 100


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(mechanism="dpmixmin", canaries=("max_clip",)), "has no one-run mode"),
        (dict(one_run_canaries=10), "one_run_canaries must be >= 20"),
        (dict(threshold="split"), "its own fixed grid"),
    ],
)
def test_a_one_run_spec_the_mechanism_cannot_run_is_refused(overrides: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        AuditSpec(**{**OPACUS, **overrides})  # type: ignore[arg-type]


def test_one_run_flags_that_mean_nothing_exit_2(tmp_path: Path, capsys) -> None:
    path = tmp_path / "spec.toml"
    path.write_text("".join(f"{k} = {json.dumps(list(v) if isinstance(v, tuple) else v)}\n" for k, v in OPACUS.items()))
    out = tmp_path / "out"
    assert cli.main(["audit", str(path), "--out", str(out), "--runs", "100"]) == cli.EXIT_BAD_INPUT
    assert "trains once" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["opacus-one-run", "user-dpsgd-one-run"])
def test_the_shipped_one_run_specs_read(name: str) -> None:
    from dpaudit_mix.audit.spec import load_spec

    spec = load_spec(Path(__file__).parent.parent / "audits" / f"{name}.toml")
    assert spec.one_run and spec.one_run_canaries == 10_000


@pytest.mark.parametrize("overrides", [dict(steps=11), dict(sample_rate=0.3)], ids=["steps", "q"])
def test_an_opacus_schedule_that_is_not_the_claim_is_refused(overrides: dict) -> None:
    """Opacus samples at 1/batches for whole epochs: T = 11 at q = 1/5 would train 10 steps, and q
    = 0.3 would train q = 1/3; either audit would test phases that did not run (the claimed phases
    are the trained ones). Refused when the spec is read, before any training."""
    with pytest.raises(InputError, match="samples at q = 1/batches and runs whole epochs"):
        AuditSpec(**{**OPACUS, **overrides})  # type: ignore[arg-type]
