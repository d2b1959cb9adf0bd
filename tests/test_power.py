"""Every many-run audit says what it could have caught (:mod:`dpaudit_mix.audit.power`): what an
exactly-claimed mechanism certifies at this size, and the smallest leak flagged 90 % of the time,
checked against independent simulations."""

from __future__ import annotations

import numpy as np

from dpaudit_mix import accounting
from dpaudit_mix.audit.many_run.scores import audit_scores
from dpaudit_mix.audit.many_run.words import power_line
from dpaudit_mix.audit.power import (
    DETECTS_WITH,
    LEAKS,
    MAX_DIRAC_DRAWS,
    MAX_SIMULATED_RUNS,
    Power,
    gaussian_counts,
    power_claim,
    power_of,
    unsimulated,
)
from dpaudit_mix.audit.profile import GaussianTradeOff
from dpaudit_mix.base.randomness import stream

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
    # past MAX_SIMULATED_RUNS only the Gaussian law's bonferroni, drawn from its counts' law, is simulated
    huge = {"phases": None, "runs_in": MAX_SIMULATED_RUNS, "runs_out": MAX_SIMULATED_RUNS, **common, "stated": "none"}
    assert power_claim(EPSILON, DELTA, **{**huge, "threshold": "split"}) is None  # type: ignore[arg-type]
    assert power_claim(EPSILON, DELTA, **huge) is not None  # type: ignore[arg-type]
    # and each case says why, in the words a report prints beside its silence
    assert "several phases" in str(unsimulated(phases, 200, "bonferroni"))
    assert "split threshold simulates score by score" in str(unsimulated((), 2 * MAX_SIMULATED_RUNS, "split"))
    assert unsimulated((), 2 * MAX_SIMULATED_RUNS, "bonferroni") is None


def test_an_audit_without_power_says_why() -> None:
    """A claim of several phases, one subsampled, whose score law is not simulated: power None,
    its reason in the result, its report's words and the command's line."""
    phases = [accounting.GaussianPhase(1.0, 0.1, 300), accounting.GaussianPhase(2.0, 1.0, 10)]
    epsilon = accounting.epsilon(phases, DELTA)
    rng = stream(0, "simulated-scores", test="power", case="unsimulated").numpy()
    result = audit_scores(rng.normal(0, 1, 100), rng.normal(0, 1, 100), epsilon=epsilon, delta=DELTA, phases=phases)
    assert result.power is None and result.to_dict()["power"] is None
    why = "several phases, one of them subsampled"
    assert why in str(result.power_unsimulated) and why in result.to_dict()["power_unsimulated"]
    assert f"No power was simulated: {result.power_unsimulated}." in power_line(result)


def test_a_subsampled_audit_past_the_step_by_step_cap_has_power() -> None:
    """200 runs × 300 steps pass MAX_DIRAC_DRAWS: the power is drawn from the score's law, and an
    exactly-claimed mechanism's ε_LB lies between 0 and the claim."""
    phase = accounting.GaussianPhase(1.0, 0.1, 300)
    epsilon = accounting.epsilon([phase], DELTA)
    assert 200 * phase.steps > MAX_DIRAC_DRAWS and unsimulated([phase], 200, "bonferroni") is None
    rng = stream(0, "simulated-scores", test="power", case="law").numpy()
    result = audit_scores(rng.normal(0, 1, 100), rng.normal(0, 1, 100), epsilon=epsilon, delta=DELTA, phases=[phase])
    assert result.power is not None and result.power_unsimulated is None
    assert 0 < result.power.tight_lower_bound < epsilon


def test_the_demo_says_what_a_private_row_could_have_shown() -> None:
    from dpaudit_mix.audit.many_run.result import SettingResult
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


def test_the_gaussian_counts_law_matches_counting_simulated_scores() -> None:
    """gaussian_counts draws the bonferroni candidates' out-scores and misses from their exact law:
    over 2,000 draws at 300 + 400 runs, each candidate's mean score and mean misses match those of
    scores simulated and counted (z below 4.5 everywhere), and so do the misses' variances
    (within 15 % where at least 5 are missed on average)."""
    runs_in, runs_out, mu, draws = 300, 400, 1.5, 2000
    source = stream(0, "simulated-scores", test="power", case="counts-law").numpy()
    law = [gaussian_counts(mu, runs_in, runs_out, source) for _ in range(draws)]
    ranks = law[0][1]
    law_values, law_misses = np.array([v for v, _, _ in law]), np.array([m for _, _, m in law])
    values, misses = np.empty_like(law_values), np.empty_like(law_misses)
    for k in range(draws):
        s_in, s_out = np.sort(mu + source.standard_normal(runs_in)), np.sort(source.standard_normal(runs_out))
        values[k] = s_out[runs_out - ranks]
        misses[k] = np.searchsorted(s_in, values[k], "right")
    for a, b in ((law_values, values), (law_misses, misses)):
        spread = np.sqrt((a.var(axis=0) + b.var(axis=0)) / draws)
        assert (np.abs(a.mean(axis=0) - b.mean(axis=0)) / spread).max() < 4.5
    common = misses.mean(axis=0) >= 5  # where a variance is estimated well from 2,000 draws
    assert np.allclose(law_misses.var(axis=0)[common], misses.var(axis=0)[common], rtol=0.15)
