"""One-run audits: the p-value of Steinke et al., the level of both verdicts by Monte Carlo on
exact Dirac-canary scores, their power against a leak, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom, binomtest

from dpaudit_mix import accounting
from dpaudit_mix.audit.dirac import dirac_scores, simulated_released
from dpaudit_mix.audit.one_run.audit import audit_one_run
from dpaudit_mix.audit.one_run.guesses import guess_sizes, p_value, p_values
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import stream

DELTA = 1e-5


def test_the_p_value_is_the_binomial_tail_plus_the_delta_term() -> None:
    q = np.exp(1.0) / (1 + np.exp(1.0))
    assert p_value(100, 40, 30, 1.0, 0.0) == pytest.approx(binom.sf(29, 40, q))
    by_hand = binom.sf(29, 40, q) + 2 * 100 * 1e-3 * max(
        sum(binom.pmf(30 - j, 40, q) for j in range(1, i + 1)) / i for i in range(1, 31)
    )
    assert p_value(100, 40, 30, 1.0, 1e-3) == pytest.approx(min(1.0, by_hand))
    values = [p_value(1000, 200, 150, eps, DELTA) for eps in (0.0, 0.5, 1.0, 2.0)]
    assert values == sorted(values) and all(0 <= v <= 1 for v in values)  # a larger ε explains more
    assert guess_sizes(1000).tolist() == sorted(set(guess_sizes(1000).tolist())) and guess_sizes(1000)[-1] == 500


@pytest.mark.parametrize(("guesses", "correct"), [(40, 1), (40, 30), (200, 200), (1000, 560), (5000, 4100)])
def test_the_profile_p_values_are_the_formula_at_every_point(guesses: int, correct: int) -> None:
    """p_values (one log-pmf recursion for all ε) against scipy's pmf term by term."""
    epsilons, deltas = np.array([0.0, 0.3, 1.0, 4.0, 20.0]), np.array([0.1, 1e-3, 1e-5, 1e-9, 1e-12])
    for e, d, got in zip(epsilons, deltas, p_values(10_000, guesses, correct, epsilons, deltas), strict=True):
        q = float(np.exp(e) / (1 + np.exp(e)))
        below = np.cumsum(binom.pmf(correct - np.arange(1, correct + 1), guesses, q))
        expected = min(
            1.0, binom.sf(correct - 1, guesses, q) + 2 * 10_000 * d * np.max(below / np.arange(1, correct + 1))
        )
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-300)


def _audit(q: float, steps: int, leak: float, trial: int, canaries: int = 1000):  # type: ignore[no-untyped-def]
    """One simulated run: ``canaries`` Dirac canaries of a mechanism calibrated to ε = 1 whose real
    σ is the claimed one over ``leak``, scored with the claimed σ."""
    sigma = accounting.calibrate(1.0, DELTA, q, steps)
    rng = stream(0, "simulated-scores", test="one-run", q=q, leak=leak, trial=trial).numpy()
    member = stream(0, "canary-membership", q=q, leak=leak, trial=trial).numpy().random(canaries) < 0.5
    scores = dirac_scores(simulated_released(member, sigma / leak, q, steps, rng), sigma, q)
    phases = [accounting.GaussianPhase(sigma, q, steps)]
    return audit_one_run(scores, member, epsilon=1.0, delta=DELTA, phases=phases, profile_bound=False)


@pytest.mark.parametrize("trials", [30, pytest.param(60, marks=pytest.mark.full)])
@pytest.mark.parametrize(("q", "steps"), [(1.0, 1), (0.1, 10)])
def test_honest_one_run_audits_keep_their_level(q: float, steps: int, trials: int) -> None:
    """Honest runs per setting (30 here, 60 in `make full`): the false-violation rate is not above
    the 5% level (binomial test), and each verdict is its bound against the claim. bench/one_run.py runs
    1,000 per setting."""
    results = [_audit(q, steps, 1.0, trial) for trial in range(trials)]
    flagged = sum(r.violation for r in results)
    assert binomtest(flagged, len(results), 0.05, alternative="greater").pvalue > 1e-3, flagged
    assert all(r.epsilon_violation == (r.epsilon_lower_bound > 1.0) for r in results)
    assert all(r.epsilon_lower_bound == max(r.bounds.values()) for r in results)


def test_a_mechanism_with_a_fifth_of_its_noise_is_flagged() -> None:
    results = [_audit(1.0, 1, 5.0, trial) for trial in range(6)]
    assert all(r.violation and r.epsilon_lower_bound > 1.0 for r in results)


def test_the_profile_bound_is_a_lower_bound_near_the_strict_one() -> None:
    sigma = accounting.calibrate(1.0, DELTA, 1.0, 1)
    member = stream(0, "canary-membership", test="profile").numpy().random(4000) < 0.5
    rng = stream(0, "simulated-scores", test="profile").numpy()
    scores = dirac_scores(simulated_released(member, sigma, 1.0, 1, rng), sigma, 1.0)
    full = audit_one_run(scores, member, epsilon=1.0, delta=DELTA, phases=[accounting.GaussianPhase(sigma, 1.0, 1)])
    assert full.epsilon_lower_bound_profile is not None and 0 < full.epsilon_lower_bound_profile < 1.0
    assert not full.violation
    assert full.to_dict()["guesses"] == full.guesses and full.to_dict()["one_run"] is True


@pytest.mark.parametrize(
    ("scores", "membership", "message"),
    [
        (np.zeros(100), np.zeros(99), "one entry per canary"),
        (np.zeros(100), np.full(100, 2), "0 or 1"),
        (np.zeros(10), np.zeros(10), "at least 20 canaries"),
        (np.r_[np.zeros(99), np.nan], np.zeros(100), "finite"),
        (np.array(["a"] * 100), np.zeros(100), "finite"),
        (np.zeros((10, 10)), np.zeros(100), "1-D"),
    ],
)
def test_bad_canaries_are_one_clear_error(scores, membership, message) -> None:
    with pytest.raises(InputError, match=message):
        audit_one_run(scores, membership, epsilon=1.0, delta=DELTA)


def test_a_claim_its_phases_do_not_spend_is_refused() -> None:
    with pytest.raises(InputError, match="not what the phases spend"):
        audit_one_run(
            np.zeros(100), np.zeros(100), epsilon=1.0, delta=DELTA, phases=[accounting.GaussianPhase(0.5, 1.0, 1)]
        )


def test_the_command_audits_one_runs_canaries_from_npz_and_csv(tmp_path, capsys) -> None:
    import json

    from dpaudit_mix.cli import main

    sigma = accounting.calibrate(1.0, DELTA, 1.0, 1)
    member = stream(0, "canary-membership", test="cli").numpy().random(2000) < 0.5
    rng = stream(0, "simulated-scores", test="cli").numpy()
    honest = dirac_scores(simulated_released(member, sigma, 1.0, 1, rng), sigma, 1.0)
    leaky = dirac_scores(simulated_released(member, sigma / 5, 1.0, 1, rng), sigma, 1.0)
    np.savez(tmp_path / "honest.npz", scores=honest, membership=member.astype(int))
    rows = "\n".join(f"{s},{int(b)}" for s, b in zip(leaky, member, strict=True))
    (tmp_path / "leaky.csv").write_text("score,label\n" + rows + "\n")
    claim = ["--epsilon", "1", "--delta", str(DELTA), "--one-run"]
    assert main(["audit-scores", str(tmp_path / "honest.npz"), *claim, "--out", str(tmp_path / "out")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["canaries"] == 2000 and not printed["violation"]
    assert (
        json.loads((tmp_path / "out" / "audit.json").read_text())["epsilon_lower_bound"]
        == printed["epsilon_lower_bound"]
    )
    assert main(["audit-scores", str(tmp_path / "leaky.csv"), *claim]) == 3
    assert "VIOLATION" in capsys.readouterr().err
    np.savez(tmp_path / "bad.npz", scores=honest, membership=np.full(2000, 3))
    assert main(["audit-scores", str(tmp_path / "bad.npz"), *claim, "--out", str(tmp_path / "none")]) == 2
    assert "0 or 1" in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_a_result_prints_as_one_line_with_its_verdict_bound_and_power() -> None:
    """``print(result)`` is :meth:`OneRunResult.summary`: the verdict, ε_LB by each method against
    the claim, and the leak the audit catches, on one line (not a 1,000-character repr)."""
    result = _audit(1.0, 1, 1.0, 0)
    line = str(result)
    assert line == result.summary() and "\n" not in line and len(line) < 400
    assert line.startswith("no violation: ε_LB = ") and "steinke" in line and "fdp" in line
    assert result.power is not None and f"catches σ/{result.power.detects:g} in 90% of audits" in line
    assert "VIOLATION (ε violated)" in str(_audit(1.0, 1, 5.0, 0))
