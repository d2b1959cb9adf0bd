import numpy as np
import pytest

from dpaudit_mix.accounting import gdp_epsilon
from dpaudit_mix.audit.attack import BUILTIN_STRATEGIES, attack
from dpaudit_mix.audit.bounds import clopper_pearson_upper, epsilon_lower_bound
from dpaudit_mix.base.errors import InputError


def test_hand_computed_zero_errors() -> None:
    # x = 0: the upper bound solves (1 − p)^n = α', i.e. p = 1 − α'^(1/n).
    n, alpha = 500, 0.05
    p = 1 - (alpha / 2) ** (1 / n)
    bound = epsilon_lower_bound(0, 0, n, n, delta=1e-5)
    assert bound.fpr_upper == pytest.approx(p) and bound.fnr_upper == pytest.approx(p)
    assert bound.epsilon_lower_bound == pytest.approx(np.log((1 - 1e-5 - p) / p))


def test_hand_computed_all_errors_and_symmetry() -> None:
    assert epsilon_lower_bound(10, 10, 10, 10, 1e-5).epsilon_lower_bound == 0.0
    a = epsilon_lower_bound(3, 40, 100, 120, 1e-5)
    b = epsilon_lower_bound(40, 3, 120, 100, 1e-5)
    assert a.epsilon_lower_bound == pytest.approx(b.epsilon_lower_bound)


def test_clopper_pearson_coverage_by_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    for p, n in [(0.1, 50), (0.02, 200), (0.5, 30)]:
        draws = rng.binomial(n, p, size=20_000)
        covered = np.mean(clopper_pearson_upper(draws, n, 0.025) >= p)
        assert covered >= 0.975 - 0.004  # exact CP is conservative; slack for MC error


@pytest.mark.parametrize("strategy", BUILTIN_STRATEGIES)
def test_null_scores_give_zero_within_coverage(strategy: str) -> None:
    rng = np.random.default_rng(1)
    include = np.arange(400) < 200
    positive = [
        attack(
            rng.standard_normal(400), rng.permutation(include), rng.permutation(include), delta=1e-5, strategy=strategy
        ).epsilon_lower_bound
        > 0
        for _ in range(300)
    ]
    assert np.mean(positive) <= 0.05 + 0.03


@pytest.mark.parametrize("strategy", BUILTIN_STRATEGIES)
@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_optimal_gaussian_attack_is_sound(eps: float, strategy: str) -> None:
    """Scores of a μ-GDP mechanism calibrated to exactly (ε, δ): ε_LB ≤ ε in ≥ 95% of audits."""
    delta = 1e-5
    sigma = 1.0
    while gdp_epsilon(sigma, 1, delta) > eps:
        sigma *= 1.01
    mu = 1 / sigma
    rng = np.random.default_rng(2)
    runs = 4000
    include = np.arange(runs) < runs // 2
    bounds = []
    for _ in range(60):
        inc, sel = rng.permutation(include), rng.permutation(include)
        scores = rng.standard_normal(runs) + mu * inc
        bounds.append(attack(scores, inc, sel, delta=delta, strategy=strategy).epsilon_lower_bound)
    bounds = np.array(bounds)
    assert np.mean(bounds > eps) <= 0.05 + 0.05
    assert bounds.mean() > 0  # the test has power: a real separation is seen


def test_a_pure_claim_has_a_strict_bound_and_no_gaussian_epsilon() -> None:
    """δ = 0: the strict bound is log((1 − FNR_ub)/FPR_ub) (Kairouz et al., Thm 2.1 at δ = 0), and
    μ_LB > 0 has no ε at δ = 0 (no μ-GDP mechanism is pure ε-DP): +inf, never a number."""
    pure = epsilon_lower_bound(5, 30, 1000, 1000, 0.0)
    assert pure.epsilon_lower_bound == pytest.approx(np.log((1 - pure.fnr_upper) / pure.fpr_upper))
    assert pure.mu_lower_bound > 0 and pure.epsilon_lower_bound_gdp == np.inf
    assert pure.epsilon_lower_bound > epsilon_lower_bound(5, 30, 1000, 1000, 1e-5).epsilon_lower_bound - 1e-3


@pytest.mark.parametrize("args", [(5, 0, 4, 4, 1e-5), (0, -1, 4, 4, 1e-5), (0, 0, 0, 4, 1e-5), (0, 0, 4, 4, 1.0)])
def test_bad_counts(args: tuple) -> None:
    with pytest.raises(InputError):
        epsilon_lower_bound(*args)
    with pytest.raises(InputError, match="confidence"):
        epsilon_lower_bound(0, 0, 4, 4, 1e-5, confidence=1.0)


def test_the_attack_carries_the_runs_it_counted() -> None:
    """The report draws each ROC from these runs: all of them for bonferroni, EVAL alone for split."""
    rng = np.random.default_rng(5)
    include, select = rng.random(400) < 0.5, rng.random(400) < 0.5
    scores = rng.normal(size=400) + include
    every = attack(scores, include, select, delta=1e-5)
    halves = attack(scores, include, select, delta=1e-5, strategy="split")
    assert every.evaluated.all() and np.array_equal(halves.evaluated, ~select)
    for result in (every, halves):
        counted = result.evaluated
        assert (result.strict.negatives, result.strict.positives) == (
            (counted & ~include).sum(),
            (counted & include).sum(),
        )
