"""Planning an audit: the first size on the ladder whose power catches σ/detect, the power the
audit of that size then reports, and the command's exits."""

from __future__ import annotations

import json

import pytest

from dpaudit_mix import Claim, accounting, plan_audit
from dpaudit_mix.audit.one_run.power import MAX_DIRAC_DRAWS, one_run_power, one_run_power_claim
from dpaudit_mix.audit.plan import CANARY_LADDER
from dpaudit_mix.cli import main
from dpaudit_mix.release.audit_size import audit_size
from dpaudit_mix.release.refused import Refused

DELTA = 1e-5


def test_a_one_run_plan_is_the_first_size_that_catches_the_leak() -> None:
    plan = plan_audit(1.0, DELTA, detect=5.0, one_run=True)
    assert plan.met and plan.canaries is not None and plan.training_runs == 1 and plan.runs is None
    assert plan.power == one_run_power(
        one_run_power_claim(1.0, DELTA, phases=None, canaries=plan.canaries, confidence=0.95)
    )
    assert plan.power is not None and plan.power.detects is not None and plan.power.detects <= 5.0
    earlier = [detects for size, detects in plan.tried if size < plan.canaries]
    assert all(d is None or d > 5.0 for d in earlier) and plan.tried[-1][0] == plan.canaries
    assert plan.canaries in CANARY_LADDER and plan.to_dict()["met"] is True


def test_the_command_prints_the_plan_and_exits_3_when_no_size_meets_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan-audit", "--epsilon", "1", "--delta", str(DELTA), "--detect", "1.1"]) == 3
    unmet = json.loads(capsys.readouterr().out)
    assert unmet["met"] is False and unmet["runs"] is None and len(unmet["tried"]) >= 1
    assert main(["plan-audit", "--epsilon", "1", "--delta", str(DELTA), "--detect", "10"]) == 0
    captured = capsys.readouterr()
    met = json.loads(captured.out)
    assert met["met"] and met["training_runs"] == 2 * met["runs"] and "runs a side" in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--detect", "0.5"], "detect must be in"),
        (["--steps", "10"], "give all of"),
        (["--detect", "nan"], "finite"),
    ],
)
def test_bad_plans_are_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan-audit", "--epsilon", "1", "--delta", str(DELTA), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_realistic_subsampled_plan_is_sized_from_the_score_law(capsys: pytest.CaptureFixture[str]) -> None:
    """q = 0.01 for 3000 steps: 1000 canaries are 3 × 10⁶ Dirac scores, past the step-by-step
    simulation, so their power is drawn from the score's law (:func:`.dirac.score_law`) and the
    plan is met, not refused as unsimulated."""
    claim = ["--epsilon", "2", "--delta", str(DELTA), "--noise-multiplier", "1.31", "--sample-rate", "0.01"]
    assert main(["plan-audit", *claim, "--steps", "3000", "--one-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["met"] is True and plan["unsimulated"] is None
    assert plan["tried"][0][0] * 3000 > MAX_DIRAC_DRAWS and plan["power"]["detects"] <= 2.0


SEVERAL = [accounting.GaussianPhase(1.31, 0.01, 300), accounting.GaussianPhase(2.0, 1.0, 10)]


@pytest.mark.parametrize("one_run", [True, False])
def test_a_plan_beyond_the_simulated_law_says_why(one_run: bool) -> None:
    """Several phases, one subsampled: their score law is not simulated, so no size on the ladder
    has a power; the plan says so and why, not "up to 0 canaries"."""
    epsilon = accounting.epsilon(SEVERAL, DELTA)
    plan = plan_audit(epsilon, DELTA, SEVERAL, one_run=one_run)
    assert not plan.met and plan.tried == () and plan.unsimulated is not None
    assert "several phases" in plan.unsimulated and "up to 0" not in plan.line()


@pytest.mark.parametrize("size", [None, 2000])
def test_a_gate_refusing_an_unsimulated_audit_says_why(size: int | None) -> None:
    """The release gate's refusal quotes the same reason as the planner, whether the spec gave a
    size (its power is not simulated) or the planner found none (it stopped at once)."""
    epsilon = accounting.epsilon(SEVERAL, DELTA)
    with pytest.raises(Refused) as refused:
        audit_size(Claim(epsilon, DELTA, SEVERAL), detect=2.0, size=size, one_run=True, confidence=0.95, minimum=1000)
    assert refused.value.stage == "power" and "several phases" in refused.value.reason
