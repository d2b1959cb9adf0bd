"""Canaries (DESIGN §6): a natural held-out example, or a max-clip worst-case gradient.

The max-clip ("Dirac") canary injects a gradient of norm exactly C along a fixed sum-zero unit
direction v whenever it is in the batch (Nasr et al. 2021): the largest change one example can
make. Sum-zero, because EG ignores the constant direction.
"""

from __future__ import annotations

import numpy as np

from ..errors import require
from ..learner import Canary
from ..mixmin import scaled_likelihoods
from ..problem import Problem

NATURAL_POLICIES = ("index", "random", "most_influential")
CANARY_KINDS = ("natural", "max_clip")


def max_clip_direction(k: int) -> np.ndarray:
    """v ∝ (+1, −1, +1, …) centred: a fixed unit direction orthogonal to the all-ones vector."""
    v = np.where(np.arange(k) % 2 == 0, 1.0, -1.0)
    v -= v.mean()
    return v / np.linalg.norm(v)


def max_clip_canary(k: int, clip: float) -> Canary:
    return Canary(gradient=clip * max_clip_direction(k))


def clipped_norms_at_uniform(logp: np.ndarray, clip: float) -> np.ndarray:
    """‖clip_C(centred gradient at uniform λ)‖ of each row: a canary's possible influence."""
    p, _ = scaled_likelihoods(logp)
    norms = np.linalg.norm(p - p.mean(axis=1, keepdims=True), axis=1) / p.mean(axis=1)
    return np.minimum(norms, clip)


def natural_canary_index(problem: Problem, policy: str, clip: float, index: int = 0, seed: int = 0) -> int:
    """Which held-out example is the canary under ``policy``."""
    require(problem.heldout_logp is not None, "a natural canary needs 'heldout_logp' in the problem file")
    m = problem.heldout_logp.shape[0]
    require(policy in NATURAL_POLICIES, f"unknown natural canary policy {policy!r}; choose from {NATURAL_POLICIES}")
    if policy == "index":
        require(0 <= index < m, f"canary index {index} out of range: the problem has {m} held-out examples")
        return index
    if policy == "random":
        return int(np.random.default_rng(seed).integers(m))
    return int(np.argmax(clipped_norms_at_uniform(problem.heldout_logp, clip)))


def natural_canary(problem: Problem, index: int) -> Canary:
    return Canary(logp=problem.heldout_logp[index])


def black_box_scores(canary: Canary, weights: np.ndarray) -> np.ndarray:
    """Scores from the released λ alone, larger when the canary was in.

    Max-clip: the canary pushes log λ along −v, so ⟨centred log λ, −v⟩. Natural: the canary's
    log-likelihood under the mixture, log(λ·p_c).
    """
    log_w = np.log(np.maximum(weights, 1e-300))
    if canary.gradient is not None:
        return -(log_w - log_w.mean(axis=1, keepdims=True)) @ canary.gradient
    p, shift = scaled_likelihoods(canary.logp[None, :])
    return np.log(weights @ p[0]) + shift[0]
