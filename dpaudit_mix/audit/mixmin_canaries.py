"""Canaries (docs/concepts/audit.md): a natural held-out example (a held-out user, all of their examples, at
user level), or a max-clip worst-case gradient.

The max-clip ("Dirac") canary injects a gradient of norm exactly C along a fixed sum-zero unit
direction v whenever it is in the batch (Nasr et al. 2021): the largest change one example can
make. Sum-zero, because EG ignores the constant direction.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from ..base.errors import present, require
from ..base.randomness import stream
from ..learner import Canary
from ..optimum import scaled_likelihoods
from ..problem import Problem

NATURAL_POLICIES = ("index", "random", "most_influential")
CANARY_KINDS = ("natural", "max_clip")


def check_canary_kinds(kinds: tuple[str, ...], key: str) -> None:
    """A spec's canary kinds: some of :data:`CANARY_KINDS`, each once (a kind named twice would be
    audited twice and counted twice in the level's share)."""
    require(
        len(kinds) >= 1 and set(kinds) <= set(CANARY_KINDS) and len(set(kinds)) == len(kinds),
        f"{key} must name some of {CANARY_KINDS}, each once, got {list(kinds)}",
    )


def max_clip_direction(k: int) -> np.ndarray:
    """v ∝ (+1, −1, +1, …) centred: a fixed unit direction orthogonal to the all-ones vector."""
    v = np.where(np.arange(k) % 2 == 0, 1.0, -1.0)
    v -= v.mean()
    return cast(np.ndarray, v / np.linalg.norm(v))


def max_clip_canary(k: int, clip: float) -> Canary:
    return Canary(gradient=clip * max_clip_direction(k))


def clipped_norms_at_uniform(logp: np.ndarray, clip: float, owners: np.ndarray | None = None) -> np.ndarray:
    """‖clip_C(centred gradient at uniform λ)‖ of each row, or with ``owners`` (dense ids 0..U−1)
    of each user's summed gradient: a canary's possible influence."""
    p, _ = scaled_likelihoods(logp)
    gradients = (p - p.mean(axis=1, keepdims=True)) / p.mean(axis=1, keepdims=True)
    if owners is not None:
        gradients = np.stack([np.bincount(owners, weights=column) for column in gradients.T], axis=1)
    return cast(np.ndarray, np.minimum(np.linalg.norm(gradients, axis=1), clip))


def _heldout_units(problem: Problem, user_level: bool) -> tuple[np.ndarray, str]:
    """Dense unit ids of the held-out rows (each row its own unit, or its user's) and their name."""
    m = _heldout(problem).shape[0]
    if not user_level:
        return np.arange(m), "examples"
    users = present(problem.heldout_users, "a user-level natural canary needs 'heldout_users' in the problem file")
    return np.unique(users, return_inverse=True)[1], "users"


def _heldout(problem: Problem) -> np.ndarray:
    return present(problem.heldout_logp, "a natural canary needs 'heldout_logp' in the problem file")


def natural_canary_index(
    problem: Problem, policy: str, *, clip: float, index: int = 0, seed: int = 0, user_level: bool = False
) -> int:
    """Which held-out example (at user level: which held-out user) is the canary under ``policy``."""
    _heldout(problem)
    require(policy in NATURAL_POLICIES, f"unknown natural canary policy {policy!r}; choose from {NATURAL_POLICIES}")
    owners, unit = _heldout_units(problem, user_level)
    m = int(owners.max()) + 1
    if policy == "index":
        require(0 <= index < m, f"canary index {index} out of range: the problem has {m} held-out {unit}")
        return index
    if policy == "random":
        return int(stream(seed, "audit-natural-canary", policy=policy).numpy().integers(m))
    return int(np.argmax(clipped_norms_at_uniform(_heldout(problem), clip, owners if user_level else None)))


def natural_canary(problem: Problem, index: int, user_level: bool = False) -> Canary:
    """The held-out example ``index``, or at user level every held-out row of user ``index``."""
    if not user_level:
        return Canary(logp=_heldout(problem)[index])
    owners, _ = _heldout_units(problem, True)
    return Canary(logp=_heldout(problem)[owners == index])


def black_box_scores(canary: Canary, weights: np.ndarray) -> np.ndarray:
    """Scores from the released λ alone, larger when the canary was in.

    Max-clip: the canary pushes log λ along −v, so ⟨centred log λ, −v⟩. Natural: the canary's
    log-likelihood under the mixture, log(λ·p_c), summed over its rows for a user.
    """
    log_w = np.log(np.maximum(weights, 1e-300))
    if canary.gradient is not None:
        along: np.ndarray = -(log_w - log_w.mean(axis=1, keepdims=True)) @ canary.gradient
        return along
    p, shift = scaled_likelihoods(np.atleast_2d(present(canary.logp, "a canary needs a gradient or log-likelihoods")))
    likelihood: np.ndarray = np.log(weights @ p.T).sum(axis=1) + shift.sum()
    return likelihood
