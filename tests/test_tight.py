"""Tight audits (docs/concepts/audit.md): GDP bounds, the claimed trade-off curve and the profile verdict,
with coverage and power checked by Monte Carlo on exact Gaussian scores and through the engine."""

import functools

import numpy as np
import pytest
from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss
from scipy.stats import binom, norm

from dpaudit_mix import accounting
from dpaudit_mix.audit.attack import BUILTIN_STRATEGIES, attack, rank_grid
from dpaudit_mix.audit.bounds import epsilon_lower_bound, gdp_mu
from dpaudit_mix.audit.many_run import engine
from dpaudit_mix.audit.many_run.diagnostics import auroc_interval, diagnose, tpr_at_fpr
from dpaudit_mix.audit.many_run.engine import run_audit
from dpaudit_mix.audit.many_run.sorted_scores import SortedScores
from dpaudit_mix.audit.profile import GaussianTradeOff, ProfileTradeOff, claimed_tradeoff
from dpaudit_mix.audit.spec import AuditSpec
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.problem import Problem, save

from .conftest import random_problem

DELTA = 1e-5
MU_1 = accounting.gdp_mu_of_epsilon(1.0, DELTA)  # the claim ε = 1 as μ-GDP (≈ 0.268)


def gaussian_audits(mu: float, runs: int, trials: int, strategy: str, seed: int = 0) -> list:
    """``trials`` audits of the optimal test against a μ-GDP mechanism (μ = 0: null scores)."""
    rng = np.random.default_rng(seed)
    half = np.arange(runs) < runs // 2
    out = []
    for _ in range(trials):
        include, select = rng.permutation(half), rng.permutation(half)
        out.append(attack(rng.standard_normal(runs) + mu * include, include, select, delta=DELTA, strategy=strategy))
    return out


def test_gdp_delta_matches_dp_accounting() -> None:
    """Our μ-GDP δ(ε) is dp_accounting's Gaussian mechanism with sensitivity 1 and noise 1/μ."""
    eps = np.linspace(0, 8, 33)
    for mu in (0.1, 0.268, 1.0, 3.0):
        library = np.asarray(GaussianPrivacyLoss(1 / mu, sensitivity=1).get_delta_for_epsilon(eps))
        assert np.max(np.abs(accounting.gdp_delta(mu, eps) - library)) < 1e-12


def test_mu_and_epsilon_round_trip_and_match_full_batch_calibration() -> None:
    for eps in (0.1, 1.0, 5.0):
        mu = accounting.gdp_mu_of_epsilon(eps, DELTA)
        assert accounting.gdp_epsilon_of_mu(mu, DELTA) == pytest.approx(eps, rel=1e-9)
    sigma = accounting.calibrate(1.0, DELTA, 1.0, 100)
    assert 0.995 * MU_1 <= np.sqrt(100) / sigma <= MU_1  # PLD calibration is pessimistic, to 1e-3
    assert accounting.gdp_epsilon_of_mu(0.0, DELTA) == 0.0 and accounting.gdp_epsilon_of_mu(-1.0, DELTA) == 0.0


def test_mu_lower_bound_hand_case_and_one_sidedness() -> None:
    assert float(gdp_mu(0.1, 0.2)) == pytest.approx(norm.ppf(0.9) - norm.ppf(0.2))
    # A test worse than random: μ_LB < 0, and no GDP bound (|μ| would certify a large ε here).
    worse = epsilon_lower_bound(4000, 4000, 5000, 5000, DELTA)
    assert worse.mu_lower_bound < 0 and worse.epsilon_lower_bound_gdp == 0.0


def test_gaussian_curve_is_the_pld_profile_curve_for_full_batch() -> None:
    """The profile route and the GDP route describe the same full-batch claim."""
    sigma = accounting.calibrate(1.0, DELTA, 1.0, 100)
    phase = accounting.GaussianPhase(sigma, 1.0, 100)
    grid = np.linspace(0, accounting.epsilon([phase], 1e-12), 2000)
    profile = ProfileTradeOff(tuple(grid), tuple(accounting.privacy_profile([phase], grid)))
    alpha = np.linspace(1e-4, 1, 500)
    gap = GaussianTradeOff(np.sqrt(100) / sigma).fnr_floor(alpha) - profile.fnr_floor(alpha)
    assert np.all(gap >= -1e-9) and gap.max() < 2e-3  # pessimistic PLD: never above, and close


def test_claimed_tradeoff_for_poisson_is_a_profile_below_the_gdp_of_full_batch() -> None:
    sigma = accounting.calibrate(1.0, DELTA, 0.25, 20)
    curve = claimed_tradeoff(1.0, DELTA, [accounting.GaussianPhase(sigma, 0.25, 20)])
    assert isinstance(curve, ProfileTradeOff)
    alpha = np.linspace(0.01, 0.99, 50)
    floor = curve.fnr_floor(alpha)
    assert np.all(np.diff(floor) <= 1e-12) and np.all(floor <= 1 - alpha + 1e-12)  # a trade-off curve
    # (FPR, FNR) of a 1.5× leak in the middle of the plane lies below it; the diagonal does not
    assert not curve.violated(np.array([0.5]), np.array([0.5]))[0]
    assert isinstance(claimed_tradeoff(1.0, DELTA, [accounting.GaussianPhase(1.0, 1.0, 100)]), GaussianTradeOff)
    assert isinstance(claimed_tradeoff(1.0, DELTA), GaussianTradeOff)


@pytest.mark.parametrize("strategy", BUILTIN_STRATEGIES)
def test_null_scores_give_no_gdp_bound(strategy: str) -> None:
    """Identical in and out scores: ε_LB_gdp = 0 in ≥ 95% of audits (one-sided μ)."""
    audits = gaussian_audits(0.0, 2000, 200, strategy, seed=1)
    assert np.mean([a.epsilon_lower_bound_gdp == 0 for a in audits]) >= 0.95
    assert np.mean([a.profile_violation(GaussianTradeOff(MU_1)) for a in audits]) == 0


@pytest.mark.parametrize("strategy", BUILTIN_STRATEGIES)
def test_exact_gaussian_mechanism_stays_within_the_confidence_level(strategy: str) -> None:
    """A mechanism exactly on its claimed curve is flagged in at most α = 5% of audits (upper
    binomial tail at 99.9% for the Monte Carlo error)."""
    claim = GaussianTradeOff(MU_1)
    trials = 200
    flagged = sum(a.profile_violation(claim) for a in gaussian_audits(MU_1, 4000, trials, strategy, seed=2))
    assert flagged <= binom.ppf(0.999, trials, 0.05)


def test_power_against_a_1_5x_leak_at_20k_runs() -> None:
    """σ/1.5 while the claim stays ε = 1: flagged in ≥ 95% of 20 audits at 20,000 runs; the honest
    mechanism in ≤ 5%; and the honest GDP bound certifies ≥ 0.6 of the claim."""
    claim = GaussianTradeOff(MU_1)
    leaky = gaussian_audits(1.5 * MU_1, 20_000, 20, "bonferroni", seed=3)
    honest = gaussian_audits(MU_1, 20_000, 20, "bonferroni", seed=4)
    assert np.mean([a.profile_violation(claim) for a in leaky]) >= 0.95
    assert np.mean([a.profile_violation(claim) for a in honest]) <= 0.05
    assert np.mean([a.epsilon_lower_bound_gdp for a in honest]) >= 0.6


def test_rank_grid_is_fixed_and_covers_both_tails() -> None:
    ranks = rank_grid(10_000, 12)
    assert ranks[0] == 1 and ranks[-1] == 10_000 and 5000 in ranks and len(ranks) == len(set(ranks))
    assert np.array_equal(rank_grid(10_000, 12), ranks)


def test_diagnostics() -> None:
    rng = np.random.default_rng(5)
    s_in, s_out = rng.standard_normal(4000) + 1.0, rng.standard_normal(4000)
    d = diagnose(SortedScores.of(s_in, s_out))
    exact = norm.cdf(1 / np.sqrt(2))  # P(N(1,1) > N(0,1))
    assert d.auroc_ci[0] <= d.auroc <= d.auroc_ci[1] and d.auroc_ci[0] < exact < d.auroc_ci[1]
    assert abs(d.auroc - exact) < 0.02
    assert d.tpr_at_fpr["0.01"] == pytest.approx(norm.sf(norm.isf(0.01) - 1), abs=0.03)
    # ties count one half; perfect separation gives TPR 1 at any FPR
    assert diagnose(SortedScores.of(np.zeros(10), np.zeros(10))).auroc == 0.5
    assert tpr_at_fpr(SortedScores.of(np.ones(10), np.zeros(10)), 1e-3) == 1.0


def test_delong_interval_covers_the_true_auroc_at_its_level() -> None:
    """Monte Carlo: 1,000 audits of 300 in- and 300 out-scores (N(1, 1) against N(0, 1)); the 95 %
    interval covers P(in > out) in 93–97 % of them (±2.2 binomial sd), and the point estimate is
    scikit-learn's, ties included."""
    from sklearn.metrics import roc_auc_score

    rng = stream(0, "simulated-scores", test="delong").numpy()
    exact = norm.cdf(1 / np.sqrt(2))
    covered = 0
    for _ in range(1000):
        s_in, s_out = rng.standard_normal(300) + 1.0, rng.standard_normal(300)
        _, low, high = auroc_interval(SortedScores.of(s_in, s_out), 0.95)
        covered += low <= exact <= high
    assert 0.93 <= covered / 1000 <= 0.97
    tied_in, tied_out = np.round(rng.standard_normal(500) + 0.5), np.round(rng.standard_normal(500))
    labels = np.r_[np.ones(500), np.zeros(500)]
    assert auroc_interval(SortedScores.of(tied_in, tied_out), 0.95)[0] == pytest.approx(
        roc_auc_score(labels, np.r_[tied_in, tied_out])
    )


#: the (ε, q, T) claims of the honest configurations below.
CLAIMS = ((1.0, 1.0, 2), (4.0, 1.0, 5), (1.0, 0.5, 2), (1.0, 0.5, 5), (1.0, 0.2, 5), (4.0, 0.5, 5))


@pytest.mark.parametrize("configurations", [10, pytest.param(50, marks=[pytest.mark.full, pytest.mark.long])])
def test_engine_profile_verdict_over_honest_configurations(tmp_path, monkeypatch, configurations: int) -> None:
    """Random honest configurations, Poisson included: the profile verdict fires no more often than
    α = 5% allows, and every result carries the GDP numbers (10 configurations here, the first 10
    of the 50 that `make full` runs). (Claims come from six (ε, q, T),
    calibrated once each, to keep the test fast: full batch and Poisson, small and large ε, the
    smallest σ among them 1.5, since a Poisson PLD call at σ < 1 takes seconds; problems, C,
    seeds and strategies vary.)"""
    monkeypatch.setattr(accounting, "calibrate", functools.cache(accounting.calibrate))
    monkeypatch.setattr(engine, "claimed_tradeoff", functools.cache(engine.claimed_tradeoff))
    rng = np.random.default_rng(0)
    fired = results = 0
    for i in range(configurations):
        prob = random_problem(int(rng.integers(10, 60)), int(rng.integers(2, 6)), seed=200 + i)
        epsilon, sample_rate, steps = CLAIMS[int(rng.integers(len(CLAIMS)))]
        path = tmp_path / f"p{i}.npz"
        save(Problem(prob.logp, prob.sources, heldout_logp=prob.logp[:3]), path)
        spec = AuditSpec(
            problem=str(path),
            epsilon=epsilon,
            rho=1.0,
            steps=steps,
            sample_rate=sample_rate,
            clip=float(rng.uniform(0.2, 3)),
            runs=512,
            seed=i,
            controls=False,
            natural_policy="random",
            threats=("white_box",),
            threshold=str(rng.choice(BUILTIN_STRATEGIES)),
        )
        summary = run_audit(spec, tmp_path / f"a{i}", progress=False).summary
        for r in summary.results:
            assert (r.claimed_mu is not None) == (spec.sample_rate == 1.0)
            assert ("claimed_mu" in r.to_dict()) == (spec.sample_rate == 1.0)
            fired += r.profile_violation
            results += 1
    assert fired <= binom.ppf(0.99, results, 0.05)


@pytest.mark.parametrize("sample_rate, steps", [(0.01, 1000), (0.1, 100)])
def test_the_profile_bound_of_points_on_the_claimed_curve_is_the_claimed_epsilon(
    sample_rate: float, steps: int
) -> None:
    """CP points a hair below the claimed curve rule out every curve of the family above it and
    none below: their ε′ is the accountant's ε, to the optimistic PLD's 0.5 % (at T = 1000 the
    coarse version reported 0.36 of it), and never above it (a lower bound)."""
    from dpaudit_mix.audit.profile import epsilon_lower_bound_profile, profile_tradeoff

    phase = accounting.GaussianPhase(accounting.calibrate(1.0, 1e-5, sample_rate, steps), sample_rate, steps)
    alpha = np.geomspace(1e-4, 0.5, 30)
    fnr = profile_tradeoff([phase]).fnr_floor(alpha) - 1e-6
    claimed = accounting.epsilon([phase], 1e-5)
    bound = epsilon_lower_bound_profile([phase], alpha, fnr, 1e-5)
    assert 0.985 * claimed <= bound <= claimed
