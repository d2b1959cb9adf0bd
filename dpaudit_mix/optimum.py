"""MixMin (docs/concepts/learner.md): the non-private mixture weights λ★ by exponentiated gradient.

L(λ) = −(1/n) Σ_j log Σ_i λ_i p_ij over the simplex Δ_k is convex. We minimise it by entropic
mirror descent and stop on the duality gap, which bounds L(λ) − L(λ★) from above (the gradient
itself does not vanish on the simplex, so its norm is no stopping rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from .base.errors import is_real, require
from .problem import checked_logp

#: the adaptive step never grows beyond this (an infinite step would make λ NaN).
MAX_STEP = 1e6


def mixture_loss(logp: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """L(λ) for one λ of shape (k,) or many of shape (R, k) (then one loss per row)."""
    from scipy.special import logsumexp  # scipy on first use: the command line starts without it

    lam = np.asarray(lam, dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_lam = np.log(lam)
    # log Σ_i λ_i p_ij as a logsumexp, so tiny likelihoods do not underflow.
    mix = logsumexp(logp[None, :, :] + np.atleast_2d(log_lam)[:, None, :], axis=2)
    loss = -mix.mean(axis=1)
    return cast(np.ndarray, loss if lam.ndim == 2 else loss[0])


def scaled_likelihoods(logp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p_ij / max_i p_ij and the row log-maxima: the update is invariant to per-row scale."""
    row_max = logp.max(axis=1, keepdims=True)
    return np.exp(logp - row_max), row_max[:, 0]


def gradient(p_scaled: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """∇L(λ) = −(1/n) Σ_j p_j / (λ·p_j); unchanged by per-row rescaling of p."""
    return cast(np.ndarray, -(p_scaled / (p_scaled @ lam)[:, None]).mean(axis=0))


def duality_gap(grad: np.ndarray, lam: np.ndarray) -> float:
    """max_i(−g_i) − ⟨λ, −g⟩ ≥ L(λ) − L(λ★) (linearisation over the simplex)."""
    return float(lam @ grad - grad.min())


@dataclass(frozen=True)
class MixMinResult:
    weights: np.ndarray
    loss: float
    gap: float
    iterations: int


def mixmin(
    logp: np.ndarray,
    tol: float = 1e-9,
    max_iter: int = 100_000,
    learning_rate: float = 1.0,
    adaptive: bool = True,
) -> MixMinResult:
    """λ★ by exponentiated gradient from uniform, until the duality gap is ≤ ``tol``.

    Plain EG needs ~10⁵ steps when λ★ sits near a vertex of the simplex, since the small
    weights then decay only like 1/t; hence the adaptive step.

    Args:
      logp: ``logp[j, i] = log p_i(y_j | x_j)``, n examples by k sources.
      tol: the duality gap that certifies λ★.
      max_iter: the most steps.
      learning_rate: the smallest step, always taken.
      adaptive: grow the step by 1.5 after each step that lowers L and halve it (retrying)
        after one that does not; False is plain EG with step ``learning_rate`` (the DP
        learner's update without noise).

    Returns:
      The ``MixMinResult``: λ★, its loss, the gap reached and the steps taken.

    Raises:
      InputError: a ``logp`` that is not a finite n × k array, or a bad setting.
    """
    from scipy.special import logsumexp

    for name, value in (("tol", tol), ("learning_rate", learning_rate)):
        require(is_real(value) and 0 < value < np.inf, f"{name} must be a finite number > 0, got {value!r}")
    require(
        isinstance(max_iter, (int, np.integer)) and not isinstance(max_iter, bool) and max_iter >= 1,
        f"max_iter must be an integer >= 1, got {max_iter!r}",
    )
    p, _ = scaled_likelihoods(checked_logp(logp))
    k = p.shape[1]
    log_lam = np.full(k, -np.log(k))
    lam = np.exp(log_lam)
    eta = learning_rate
    loss = -np.mean(np.log(p @ lam))  # L up to a constant: all the step control needs
    gap = np.inf
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (it is the count of iterations returned)
        grad = gradient(p, lam)
        gap = duality_gap(grad, lam)
        if gap <= tol:
            break
        while True:
            candidate = log_lam - eta * grad
            candidate -= logsumexp(candidate)
            new_loss = -np.mean(np.log(p @ np.exp(candidate)))
            if not adaptive or new_loss <= loss or eta == learning_rate:
                break
            eta = max(eta / 2, learning_rate)
        log_lam, lam, loss = candidate, np.exp(candidate), new_loss
        if adaptive:
            eta = min(eta * 1.5, MAX_STEP)
    else:
        gap = duality_gap(gradient(p, lam), lam)
    return MixMinResult(lam, float(mixture_loss(logp, lam)), float(gap), it)
