from dataclasses import replace

import numpy as np
import pytest
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.learner import BLOCK, Canary, LearnerConfig, clipped_gradient_sum, fit
from dpaudit_mix.optimum import mixmin, scaled_likelihoods
from dpaudit_mix.problem import Problem

from .conftest import random_problem

NOISE = stream(0, "learner-noise", test="learner")


def _eg_iterates(logp: np.ndarray, steps: int, lr: float) -> np.ndarray:
    """Plain full-batch exponentiated gradient from uniform (the non-private recursion)."""
    return mixmin(logp, tol=1e-300, max_iter=steps, learning_rate=lr, adaptive=False).weights


def test_noiseless_unclipped_is_exponentiated_gradient(small_problem: Problem) -> None:
    config = LearnerConfig(steps=40, clip=1e6, noise_multiplier=0.0, learning_rate=0.7)
    weights = fit(small_problem, config, 3, NOISE).weights
    np.testing.assert_allclose(weights, np.tile(_eg_iterates(small_problem.logp, 40, 0.7), (3, 1)), atol=2e-5)


def test_clipped_sum_matches_opacus(small_problem: Problem) -> None:
    """One step's clipped gradient sum against Opacus' per-sample clipping on a GradSampleModule.

    ℓ_j(λ) = −(p̃_j·λ)/f_j with f_j = p_j·λ held fixed has gradient −p̃_j/f_j: the centred
    per-example gradient our learner clips, produced here by torch autograd and Opacus.
    """
    clip = 0.8
    lam = np.random.default_rng(1).dirichlet(np.ones(small_problem.k))
    p, _ = scaled_likelihoods(small_problem.logp)
    centred = p - p.mean(axis=1, keepdims=True)
    layer = torch.nn.Linear(small_problem.k, 1, bias=False, dtype=torch.float64)
    layer.weight.data = torch.tensor(lam[None, :])
    model = GradSampleModule(layer, loss_reduction="sum")
    optimizer = DPOptimizer(
        torch.optim.SGD(model.parameters(), lr=1.0),
        noise_multiplier=0.0,
        max_grad_norm=clip,
        expected_batch_size=small_problem.n,
        loss_reduction="sum",
    )
    f = torch.tensor(p @ lam)
    loss = -(model(torch.tensor(centred))[:, 0] / f).sum()
    loss.backward()
    optimizer.pre_step()
    ours = clipped_gradient_sum(small_problem, lam[:, None], clip)[:, 0]
    np.testing.assert_allclose(ours, layer.weight.grad.numpy()[0], rtol=2e-5, atol=2e-6)


def test_noise_scale_and_normaliser() -> None:
    """Identical proxies give zero gradients, so one step moves log λ by −η σ C z / (q n)."""
    n, k, sigma, clip, q = 50, 4, 2.0, 0.5, 0.4
    prob = Problem(np.full((n, k), -0.3), tuple("abcd"))
    config = LearnerConfig(steps=1, clip=clip, noise_multiplier=sigma, sample_rate=q, learning_rate=1.0)
    weights = fit(prob, config, 4 * BLOCK, noise=stream(5, "learner-noise")).weights
    centred_log = np.log(weights) - np.log(weights).mean(axis=1, keepdims=True)
    # the centred log-weights of one run are −σC/(qn)·(z − mean z): variance (1 − 1/k)(σC/qn)².
    expected = (sigma * clip / (q * n)) ** 2 * (1 - 1 / k)
    assert centred_log.var() == pytest.approx(expected, rel=0.15)


def test_runs_do_not_depend_on_chunking_or_threads(small_problem: Problem) -> None:
    config = LearnerConfig(steps=10, noise_multiplier=3.0)
    whole = fit(small_problem, config, 2 * BLOCK + 9, noise=stream(7, "learner-noise"), threads=2).weights
    part = fit(
        small_problem, config, np.arange(BLOCK + 3, 2 * BLOCK + 9), noise=stream(7, "learner-noise"), threads=1
    ).weights
    np.testing.assert_array_equal(whole[BLOCK + 3 :], part)
    other_seed = fit(small_problem, config, 5, noise=stream(8, "learner-noise")).weights
    assert not np.allclose(other_seed, whole[:5])
    assert len({tuple(row) for row in whole.round(12)}) == len(whole)  # independent runs differ


def test_poisson_runs_reproducible(small_problem: Problem) -> None:
    config = LearnerConfig(steps=5, noise_multiplier=1.0, sample_rate=0.3)
    a = fit(small_problem, config, [3, 70], noise=stream(1, "learner-noise")).weights
    b = fit(small_problem, config, [70, 3], noise=stream(1, "learner-noise")).weights
    np.testing.assert_array_equal(a, b[::-1])


def test_user_level_with_singleton_users_equals_example_level(small_problem: Problem) -> None:
    singletons = Problem(small_problem.logp, small_problem.sources, users=np.arange(small_problem.n)[::-1].copy())
    config = LearnerConfig(steps=8, noise_multiplier=2.0, clip=0.5)
    user = fit(singletons, replace(config, user_level=True), 4, noise=stream(3, "learner-noise")).weights
    example = fit(singletons, config, 4, noise=stream(3, "learner-noise")).weights
    np.testing.assert_allclose(user, example, rtol=1e-5, atol=1e-7)


def test_user_level_clips_the_user_sum() -> None:
    prob = random_problem(90, 4, seed=2, users=True)
    lam = np.full((4, 1), 0.25)
    user_sum = clipped_gradient_sum(prob, lam, clip=0.05, user_level=True)
    assert np.linalg.norm(user_sum) <= 0.05 * 30 + 1e-6  # 30 users, each clipped to C
    example_sum = clipped_gradient_sum(prob, lam, clip=0.05)
    assert not np.allclose(user_sum, example_sum)


def test_user_level_needs_users(small_problem: Problem) -> None:
    with pytest.raises(InputError, match="users"):
        fit(small_problem, LearnerConfig(user_level=True), 1, NOISE)


def test_secure_mode_runs_differ(small_problem: Problem) -> None:
    config = LearnerConfig(steps=3, noise_multiplier=1.0, secure=True)
    a, b = fit(small_problem, config, 2).weights, fit(small_problem, config, 2).weights
    assert not np.array_equal(a, b)
    assert np.allclose(a.sum(axis=1), 1)


def test_max_clip_canary_shifts_included_runs(small_problem: Problem) -> None:
    direction = np.array([1.0, -1.0, 0.0, 0.0, 0.0]) / np.sqrt(2)
    canary = Canary(gradient=direction * 3.0)
    include = np.arange(2 * BLOCK) % 2 == 0
    result = fit(
        small_problem,
        LearnerConfig(steps=20, noise_multiplier=0.5),
        2 * BLOCK,
        noise=stream(1, "learner-noise"),
        canary=canary,
        include=include,
    )
    s_in, s_out = result.whitebox_scores[include], result.whitebox_scores[~include]
    # white-box score: Σ_t ⟨noise + canary, v̂⟩ has mean 3T in, 0 out, std σC√T = 1.5·√20
    assert s_in.mean() == pytest.approx(60, abs=3) and s_out.mean() == pytest.approx(0, abs=3)
    assert s_out.std() == pytest.approx(1.5 * np.sqrt(20), rel=0.2)


@pytest.mark.parametrize(
    "kwargs", [{"steps": 0}, {"clip": 0}, {"sample_rate": 0}, {"sample_rate": 1.5}, {"noise_multiplier": -1}]
)
def test_bad_config(kwargs: dict) -> None:
    with pytest.raises(InputError):
        LearnerConfig(**kwargs)


def test_log_normalise_is_the_logsumexp_projection_onto_the_simplex() -> None:
    """The learner's own normalisation (scipy's dispatch was a third of an audit's CPU) gives
    scipy's logsumexp answer to rounding, also where entries differ by hundreds of nats."""
    from scipy.special import logsumexp

    from dpaudit_mix.learner import _log_normalise

    rng = np.random.default_rng(0)
    log_lam = rng.normal(size=(42, 64)) * np.repeat([1.0, 50.0, 300.0], 14)[:, None]
    expected = log_lam - logsumexp(log_lam, axis=0, keepdims=True)
    _log_normalise(log_lam)
    np.testing.assert_allclose(log_lam, expected, rtol=1e-13, atol=1e-12)
    assert np.allclose(np.exp(log_lam).sum(axis=0), 1.0, rtol=1e-14, atol=0)
