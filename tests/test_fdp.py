"""The f-DP one-run test (Mahloujifar et al. 2025), the Gaussian-pair estimate and one-run power:
the level of each rejection by Monte Carlo on honest Gaussian, Laplace (pure ε) and
randomized-response canaries at small size (bench/one_run_fdp.py runs m = 10⁴), its power
against a leak, and the estimate's closed form."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from dpaudit_mix import accounting
from dpaudit_mix.audit.one_run.audit import audit_one_run
from dpaudit_mix.audit.one_run.estimate import gaussian_pair, pair_delta
from dpaudit_mix.audit.one_run.fdp import GaussianCurves, LineCurves, rejects
from dpaudit_mix.audit.one_run.guesses import GuessSets, tie_break
from dpaudit_mix.audit.one_run.power import one_run_power, one_run_power_claim
from dpaudit_mix.base.randomness import stream

DELTA = 1e-5
MU = accounting.gdp_mu_of_epsilon(1.0, DELTA)
CANARIES, TRIALS, LEVEL = 1000, 400, 0.05


def _canaries(law: str, trial: int, leak: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """One run's scores and membership under an exactly ε = 1 mechanism of ``law`` (σ/leak)."""
    source = stream(0, "simulated-scores", test="fdp", law=law, trial=trial, leak=leak).numpy()
    member = source.random(CANARIES) < 0.5
    if law == "gaussian":
        return MU * leak * member + source.standard_normal(CANARIES), member
    if law == "laplace":  # sensitivity 1, scale 1/ε: pure 1-DP per canary
        return member + source.laplace(0.0, 1.0 / leak, CANARIES), member
    keep = np.exp(leak) / (1 + np.exp(leak))  # randomized response: the canary's bit, kept w.p. e^ε/(1+e^ε)
    return np.where(source.random(CANARIES) < keep, member, ~member).astype(float), member


def _curve(law: str) -> GaussianCurves | LineCurves:
    return GaussianCurves(np.array([MU])) if law == "gaussian" else LineCurves.approximate(np.array([1.0]), 0.0)


@pytest.mark.parametrize("law", ["gaussian", "laplace", "randomized-response"])
def test_each_guess_set_rejects_a_true_curve_at_most_at_its_level(law: str) -> None:
    """Every set on its own, at level 0.05 (no Bonferroni): the rejection rate of the curve the
    mechanism meets exactly is not above the level (binomial test over TRIALS runs)."""
    runs = [GuessSets.of(*_canaries(law, t), tie_break(CANARIES, t, law), one_sided=True) for t in range(TRIALS)]
    found = rejects(
        _curve(law),
        CANARIES,
        np.concatenate([r.guesses for r in runs]),
        np.concatenate([r.correct for r in runs]),
        LEVEL,
    )
    per_set = found[:, 0].reshape(TRIALS, -1).sum(axis=0)
    for flagged in per_set:
        assert binomtest(int(flagged), TRIALS, LEVEL, alternative="greater").pvalue > 1e-3, per_set


def test_the_recursion_matches_a_single_set_and_rejects_a_leak() -> None:
    """Stacked sets give each set's own answer; 3× the claimed μ is rejected, the claim is not."""
    scores, member = _canaries("gaussian", 0, leak=3.0)
    sets = GuessSets.of(scores, member, tie_break(CANARIES, 0, "leak"), one_sided=False)
    curves = GaussianCurves(np.array([MU, 3 * MU, 0.5 * MU]))
    together = rejects(curves, CANARIES, sets.guesses, sets.correct, LEVEL)
    alone = np.vstack(
        [rejects(curves, CANARIES, sets.guesses[i : i + 1], sets.correct[i : i + 1], LEVEL) for i in range(len(sets))]
    )
    assert (together == alone).all()
    assert together[:, 0].any() and together[:, 2].any() and not together[:, 1].any()


@pytest.mark.parametrize("law", ["gaussian", "laplace", "randomized-response"])
def test_honest_audits_keep_their_level_and_a_doubled_leak_is_caught(law: str) -> None:
    honest = [audit_one_run(*_canaries(law, t), epsilon=1.0, delta=DELTA) for t in range(24)]
    assert binomtest(sum(r.violation for r in honest), 24, LEVEL, alternative="greater").pvalue > 1e-3
    assert all(r.epsilon_lower_bound == max(r.bounds.values()) for r in honest)
    leaky = [audit_one_run(*_canaries(law, t, leak=3.0), epsilon=1.0, delta=DELTA) for t in range(6)]
    assert sum(r.violation for r in leaky) >= 5


def test_the_estimate_is_the_gdp_epsilon_at_equal_variances_and_covers_the_truth() -> None:
    mu = np.array([MU])
    one = np.array([1.0])
    assert pair_delta(np.array([1.0]), mu, one, np.zeros(1), one)[0] == pytest.approx(
        accounting.gdp_delta(MU, 1.0), rel=1e-6
    )
    x = np.linspace(-40, 40, 400_001)
    for m1, s1, m0, s0 in ((0.5, 1.3, 0.0, 1.0), (0.2, 0.8, 0.1, 1.0)):
        p1 = np.exp(-((x - m1) ** 2) / (2 * s1**2)) / (s1 * np.sqrt(2 * np.pi))
        p0 = np.exp(-((x - m0) ** 2) / (2 * s0**2)) / (s0 * np.sqrt(2 * np.pi))
        gap = x[1] - x[0]
        numeric = max(np.maximum(p1 - np.e * p0, 0).sum() * gap, np.maximum(p0 - np.e * p1, 0).sum() * gap)
        closed = pair_delta(np.array([1.0]), *(np.array([v]) for v in (m1, s1, m0, s0)))[0]
        assert closed == pytest.approx(numeric, rel=1e-4, abs=1e-9)
    covered = 0
    for t in range(30):
        scores, member = _canaries("gaussian", t)
        found = gaussian_pair(scores[member], scores[~member], DELTA, 0.95)
        assert found.value is not None and found.interval is not None
        covered += found.interval[0] <= 1.0 <= found.interval[1]
    assert covered >= 25  # 95% intervals over 30 runs
    constant = gaussian_pair(np.ones(50), np.zeros(50), DELTA, 0.95)
    assert constant.value is None and not constant.fit_ok and "constant" in constant.line()
    laplace = gaussian_pair(*(lambda s, b: (s[b], s[~b]))(*_canaries("laplace", 0)), DELTA, 0.95)
    assert laplace.normality_p is not None and min(laplace.normality_p) < 0.01 and not laplace.fit_ok


def test_one_run_power_is_reproducible_and_grows_with_the_canaries() -> None:
    small = one_run_power(one_run_power_claim(1.0, DELTA, phases=None, canaries=500, confidence=0.95))
    large = one_run_power(one_run_power_claim(1.0, DELTA, phases=None, canaries=5000, confidence=0.95))
    assert small is not None and large is not None
    assert large.tight_lower_bound > small.tight_lower_bound
    assert large.detects is not None and (small.detects is None or small.detects > large.detects)
    from dpaudit_mix.audit.one_run import power as module

    module._power.cache_clear()  # computed afresh from its named stream: the same answer
    again = one_run_power(one_run_power_claim(1.0, DELTA, phases=None, canaries=5000, confidence=0.95))
    assert again == large
    several = [accounting.GaussianPhase(1.0, 0.5, 10_000), accounting.GaussianPhase(2.0, 1.0, 10)]
    assert one_run_power_claim(1.0, DELTA, phases=several, canaries=10_000, confidence=0.95) is None
