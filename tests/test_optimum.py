import numpy as np
import pytest
from scipy.optimize import minimize

from dpaudit_mix.optimum import duality_gap, gradient, mixmin, mixture_loss, scaled_likelihoods

from .conftest import random_problem


def _scipy_optimum(logp: np.ndarray) -> float:
    """An independent solver: SLSQP on the simplex with the analytic gradient."""
    k = logp.shape[1]
    p, _ = scaled_likelihoods(logp)

    def objective(lam: np.ndarray) -> tuple[float, np.ndarray]:
        lam = np.clip(lam, 1e-300, None)
        return float(mixture_loss(logp, lam)), gradient(p, lam)

    res = minimize(
        objective,
        np.full(k, 1 / k),
        jac=True,
        method="SLSQP",
        bounds=[(0, 1)] * k,
        constraints=[{"type": "eq", "fun": lambda lam: lam.sum() - 1}],
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    return float(res.fun)


@pytest.mark.parametrize("seed", range(8))
def test_matches_independent_solver(seed: int) -> None:
    rng = np.random.default_rng(seed)
    prob = random_problem(int(rng.integers(30, 400)), int(rng.integers(2, 12)), seed)
    result = mixmin(prob.logp)
    assert result.gap <= 1e-9
    assert abs(result.loss - _scipy_optimum(prob.logp)) <= 1e-6
    assert result.weights.min() >= 0 and abs(result.weights.sum() - 1) < 1e-12


def test_gap_bounds_suboptimality(small_problem) -> None:
    p, _ = scaled_likelihoods(small_problem.logp)
    best = mixmin(small_problem.logp).loss
    rng = np.random.default_rng(3)
    for lam in rng.dirichlet(np.ones(small_problem.k), size=20):
        gap = duality_gap(gradient(p, lam), lam)
        assert mixture_loss(small_problem.logp, lam) - best <= gap + 1e-12


def test_loss_is_row_scale_invariant_up_to_constant(small_problem) -> None:
    lam = np.full(small_problem.k, 1 / small_problem.k)
    shift = np.linspace(-3, 0, small_problem.n)[:, None]
    diff = mixture_loss(small_problem.logp + shift, lam) - mixture_loss(small_problem.logp, lam)
    assert diff == pytest.approx(-shift.mean())


def test_adaptive_step_reaches_a_vertex_optimum_in_few_iterations() -> None:
    """λ★ at a vertex: plain EG crawls (small weights decay like 1/t); the adaptive step does not."""
    prob = random_problem(400, 12, seed=5)
    logp = prob.logp.copy()
    logp[:, 0] = np.log(np.clip(np.exp(logp).max(axis=1) * 1.2, None, 1.0))  # source 0 dominates
    fast = mixmin(logp)
    plain = mixmin(logp, adaptive=False, max_iter=fast.iterations)
    assert fast.gap <= 1e-9 and fast.weights[0] > 0.99
    assert fast.iterations < 1_000 and plain.gap > 100 * fast.gap
    assert abs(fast.loss - _scipy_optimum(logp)) <= 1e-6


@pytest.mark.parametrize(
    "logp, message",
    [
        (np.full((10, 3), np.nan), "NaN or infinite"),
        (np.zeros((0, 3)), "no examples"),
        (np.zeros((5, 1)), "k >= 2"),
        (np.zeros(5), "2-D array"),
        (np.zeros((5, 3), dtype=complex), "real numbers"),
        ([["a", "b"], ["c", "d"]], "real numbers"),
        (np.ones((5, 3)), "positive log-likelihood"),
    ],
)
def test_bad_logp_is_refused_before_any_step(logp, message: str) -> None:
    """A λ from NaN (after 110 s) or from no examples at all was a silent wrong answer."""
    with pytest.raises(ValueError, match=message):
        mixmin(logp)
