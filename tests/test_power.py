"""Every many-run audit says what it could have caught (:mod:`dpaudit_mix.audit.power`): what an
exactly-claimed mechanism certifies at this size, and the smallest leak flagged 90 % of the time,
checked against independent simulations."""

from __future__ import annotations

import numpy as np

from dpaudit_mix import accounting
from dpaudit_mix.audit.power import DETECTS_WITH, LEAKS, Power, power_claim, power_of
from dpaudit_mix.audit.profile import GaussianTradeOff
from dpaudit_mix.audit.scores import audit_scores
from dpaudit_mix.randomness import stream

EPSILON, DELTA, RUNS = 1.0, 1e-5, 1000
MU = accounting.gdp_mu_of_epsilon(EPSILON, DELTA)


def _flag_rate(mu: float, audits: int, name: str) -> tuple[float, list[float]]:
    flags, bounds = 0, []
    for k in range(audits):
        rng = stream(k, "simulated-scores", test="power", case=name).numpy()
        result = audit_scores(rng.normal(mu, 1, RUNS), rng.normal(0, 1, RUNS), epsilon=EPSILON, delta=DELTA, seed=k)
        flags += result.violation
        bounds.append(result.epsilon_lower_bound)
    return flags / audits, bounds


def test_an_audit_reports_its_power_and_independent_simulations_agree() -> None:
    rng = stream(0, "simulated-scores", test="power", case="one").numpy()
    result = audit_scores(rng.normal(MU, 1, RUNS), rng.normal(0, 1, RUNS), epsilon=EPSILON, delta=DELTA)
    power = result.power
    assert power is not None and result.to_dict()["power"]["detects"] == power.detects
    assert power.band[0] <= power.tight_lower_bound <= power.band[1] < EPSILON
    assert power.detects is not None and power.detects > 1
    # the exact mechanism, audited afresh on other draws: its median ε_LB within the band
    _, exact = _flag_rate(MU, 30, "exact")
    assert power.band[0] <= float(np.median(exact)) <= power.band[1]
    # the leak it says it catches is caught most of the time; one a grid step smaller, less often
    caught, _ = _flag_rate(MU * power.detects, 30, "caught")
    assert caught >= DETECTS_WITH - 0.15
    smaller = LEAKS[LEAKS.index(power.detects) - 1] if LEAKS.index(power.detects) else 1.0
    missed, _ = _flag_rate(MU * smaller, 30, "smaller")
    assert missed <= DETECTS_WITH + 0.1  # else detects would not be the smallest leak caught


def audit_power(epsilon: float, delta: float, **claim: object) -> Power | None:
    return power_of(power_claim(epsilon, delta, **claim))  # type: ignore[arg-type]


def test_power_grows_with_the_runs_and_is_cached_per_claim() -> None:
    claimed = GaussianTradeOff(MU)
    common = {"phases": None, "claimed": claimed, "stated": "none", "confidence": 0.95, "threshold": "bonferroni"}
    small = audit_power(EPSILON, DELTA, runs_in=500, runs_out=500, **common)
    large = audit_power(EPSILON, DELTA, runs_in=5000, runs_out=5000, **common)
    assert small is not None and large is not None
    assert large.tight_lower_bound > small.tight_lower_bound
    assert (large.detects or 11) <= (small.detects or 11)
    assert audit_power(EPSILON, DELTA, runs_in=500, runs_out=500, **common) is small  # cached


def test_no_power_where_the_claimed_law_is_not_simulated() -> None:
    phases = [accounting.GaussianPhase(1.0, 0.1, 50), accounting.GaussianPhase(1.0, 0.1, 50)]
    common = {"claimed": GaussianTradeOff(MU), "stated": "phases", "confidence": 0.95, "threshold": "bonferroni"}
    assert audit_power(EPSILON, DELTA, phases=phases, runs_in=100, runs_out=100, **common) is None


def test_the_demo_says_what_a_private_row_could_have_shown() -> None:
    from dpaudit_mix.audit.result import SettingResult
    from dpaudit_mix.demo import _power

    rng = stream(0, "simulated-scores", test="power", case="demo").numpy()
    result = audit_scores(rng.normal(0, 1, 200), rng.normal(0, 1, 200), epsilon=EPSILON, delta=DELTA)
    private = SettingResult.of(result, "max_clip", "white_box", True)
    power = private.power
    assert power is not None
    caught = "no leak up to σ/10" if power.detects is None else f"catches σ/{power.detects:g}"
    line = _power(private, EPSILON)
    assert f"{power.tight_lower_bound:.2f} at 400 runs" in line and caught in line and "ε = 1 mechanism" in line
    assert _power(SettingResult.of(result, "max_clip", "white_box", False), EPSILON) == ""
