"""Pure-ε claims (δ = 0): the textbook mechanisms, Laplace and randomized response, audited at
their own ε by the many-run strict bound and the one-run Steinke and f-DP tests, keep the level;
their power is drawn from a pure mechanism's law, not a Gaussian one; a Gaussian claim at δ = 0
is refused."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import binom

from dpaudit_mix import accounting, audit_scores
from dpaudit_mix.audit.one_run.audit import audit_one_run
from dpaudit_mix.audit.one_run.power import one_run_power, one_run_power_claim
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import stream

EPSILON, LEVEL = 1.0, 0.05


def _flag_limit(audits: int) -> int:
    """The most flags that are no evidence against a flag rate at the level (one-sided binomial
    test at 10⁻³)."""
    return int(binom.ppf(1 - 1e-3, audits, LEVEL))


def _many_run(mechanism: str, runs: int, trial: int, epsilon: float = EPSILON) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` canary-in and canary-out scores of an exactly ε-DP mechanism: the Laplace mechanism
    of a sensitivity-1 count (scale 1/ε), or randomized response (the bit told truly w.p. e^ε/(1 + e^ε))."""
    source = stream(0, "simulated-scores", test="pure", mechanism=mechanism, runs=runs, trial=trial).numpy()
    if mechanism == "laplace":
        return 1 + source.laplace(0.0, 1 / epsilon, runs), source.laplace(0.0, 1 / epsilon, runs)
    truthful = expit(epsilon)
    return (source.random(runs) < truthful).astype(float), (source.random(runs) >= truthful).astype(float)


@pytest.mark.parametrize("audits", [12, pytest.param(200, marks=pytest.mark.full)])
@pytest.mark.parametrize("mechanism", ["laplace", "randomized-response"])
def test_many_run_pure_claims_keep_the_level(mechanism: str, audits: int) -> None:
    """2,000 runs a side at δ = 0: the strict bound exceeds ε no more often than the level."""
    flagged = 0
    for trial in range(audits):
        result = audit_scores(*_many_run(mechanism, 2000, trial), epsilon=EPSILON, delta=0.0, seed=trial)
        flagged += result.violation
        assert result.curve == "none" and result.gdp_comparison is None  # no Gaussian curve is pure
    assert flagged <= _flag_limit(audits), f"{flagged} of {audits}"


def test_a_pure_claim_below_the_mechanism_is_flagged() -> None:
    """Laplace at ε = 2, claimed pure ε = 1: the strict bound at δ = 0 sees it."""
    result = audit_scores(*_many_run("laplace", 5000, 0, epsilon=2.0), epsilon=EPSILON, delta=0.0)
    assert result.epsilon_violation and result.epsilon_lower_bound > EPSILON


def _one_run(canaries: int, trial: int, epsilon: float = EPSILON) -> tuple[np.ndarray, np.ndarray]:
    source = stream(0, "simulated-scores", test="pure-one-run", m=canaries, trial=trial).numpy()
    member = (source.random(canaries) < 0.5).astype(np.int64)
    return member + source.laplace(0.0, 1 / epsilon, canaries), member


@pytest.mark.parametrize(("audits", "canaries"), [(12, 2000), pytest.param(200, 10_000, marks=pytest.mark.full)])
def test_one_run_laplace_at_delta_zero_keeps_the_level(audits: int, canaries: int) -> None:
    """The Laplace mechanism at ε = 1, δ = 0, one-run audits of ``canaries`` canaries: flagged no
    more often than the level (Steinke's bound and the f-DP line at δ = 0)."""
    results = [audit_one_run(*_one_run(canaries, t), epsilon=EPSILON, delta=0.0) for t in range(audits)]
    flagged = sum(r.violation for r in results)
    assert flagged <= _flag_limit(audits), f"{flagged} of {audits}"
    assert all(r.epsilon_estimate.value is None for r in results)  # no Gaussian pair is pure ε-DP


def test_a_pure_claims_power_is_the_laplace_mechanisms() -> None:
    """The one-run power of a pure claim simulates the Laplace mechanism of ε: its median ε_LB
    band holds what honest Laplace audits show, and the method names the law."""
    power = one_run_power(one_run_power_claim(EPSILON, 0.0, phases=None, canaries=2000, confidence=0.95))
    assert power is not None and "Laplace mechanism of ε" in power.method
    honest = np.median(
        [audit_one_run(*_one_run(2000, t), epsilon=EPSILON, delta=0.0).epsilon_lower_bound for t in range(12)]
    )
    assert power.band[0] <= honest <= power.band[1]


def test_a_many_run_pure_claims_power_is_the_laplace_mechanisms() -> None:
    result = audit_scores(*_many_run("laplace", 2000, 0), epsilon=EPSILON, delta=0.0)
    power = result.power
    assert power is not None and "Laplace mechanism of ε" in power.method
    assert 0 < power.tight_lower_bound < EPSILON and power.detects is not None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("phases at delta 0", "no Gaussian mechanism is pure"),
        ("gdp curve at delta 0", "never pure epsilon-DP"),
        ("empty phases", r"phases=\[\] states no mechanism"),
        ("empty phases one-run", r"phases=\[\] states no mechanism"),
    ],
)
def test_claims_that_state_nothing_or_a_pure_gaussian_are_refused(call: str, message: str) -> None:
    scores = _many_run("laplace", 100, 0)
    phase = accounting.GaussianPhase(1.0, 1.0, 1)
    with pytest.raises(InputError, match=message):
        if call == "phases at delta 0":
            audit_scores(*scores, epsilon=EPSILON, delta=0.0, phases=[phase])
        elif call == "gdp curve at delta 0":
            audit_scores(*scores, epsilon=EPSILON, delta=0.0, curve="gdp")
        elif call == "empty phases":
            audit_scores(*scores, epsilon=EPSILON, delta=1e-5, phases=[])
        else:
            audit_one_run(*_one_run(100, 0), epsilon=EPSILON, delta=1e-5, phases=[])


def test_a_pure_claims_audit_json_and_report_hold_no_infinity(tmp_path, capsys) -> None:
    """δ = 0: the μ-GDP readings have no finite ε; audit.json (parsed strictly) holds them as None
    under diagnostics, never Infinity at the top, and the report prints "—", never "inf"."""
    from dpaudit_mix.base import strict_json
    from dpaudit_mix.cli import main

    scores_in, scores_out = _many_run("laplace", 2000, 0)
    np.savez(tmp_path / "s.npz", in_scores=scores_in, out_scores=scores_out)
    out = tmp_path / "audit"
    assert main(["audit-scores", str(tmp_path / "s.npz"), "--epsilon", "1", "--delta", "0", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for text in (printed, (out / "audit.json").read_text()):
        result = strict_json.loads(text, "audit.json")
        assert "epsilon_lower_bound_profile" not in result and "epsilon_lower_bound_gdp" not in result
        assert result["diagnostics"]["gdp_reading"]["epsilon_lower_bound_gdp"] is None
    report = (out / "report.md").read_text()
    assert "inf" not in report.replace("information", "") and "alone (pure ε: no phases, no curve stated)" in report
