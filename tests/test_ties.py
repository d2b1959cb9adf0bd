"""Tied scores are broken at random (a randomized threshold test): discrete scores certify
what their ROC allows, and an honest mechanism still passes at the level, by Monte Carlo."""

from __future__ import annotations

import numpy as np

from dpaudit_mix.audit.attack import attack
from dpaudit_mix.audit.scores import audit_scores
from dpaudit_mix.audit.ties import tie_broken
from dpaudit_mix.randomness import stream

DELTA = 1e-5


def _randomized_response(seed: int, per_side: int, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    truth = np.exp(epsilon) / (1 + np.exp(epsilon))
    rng = stream(seed, "simulated-scores", test="ties", per_side=per_side).numpy()
    return (rng.random(per_side) < truth).astype(float), (rng.random(per_side) >= truth).astype(float)


def test_an_honest_randomized_response_keeps_the_level() -> None:
    """60 audits of randomized response at ε = 1 (1,000 scores a side): each flags it with
    probability at most α = 0.05, so more than 9 flags would happen with probability < 0.01."""
    flags = 0
    for seed in range(60):
        scores_in, scores_out = _randomized_response(seed, 1000, 1.0)
        flags += audit_scores(scores_in, scores_out, epsilon=1.0, delta=DELTA, seed=seed).violation
    assert flags <= 9


def test_the_tie_break_certifies_more_than_plain_thresholds_and_never_the_true_epsilon() -> None:
    gains, bounds = [], []
    for seed in range(5):
        scores_in, scores_out = _randomized_response(seed, 2000, 1.0)
        result = audit_scores(scores_in, scores_out, epsilon=1.0, delta=DELTA, seed=seed)
        scores = np.concatenate([scores_in, scores_out])
        plain = attack(scores, np.arange(4000) < 2000, np.zeros(4000, bool), delta=DELTA)
        gains.append(result.epsilon_lower_bound - plain.epsilon_lower_bound)
        bounds.append(result.epsilon_lower_bound)
        assert result.threshold in (0.0, 1.0)  # reported in the scores' own units
    # where the tied block's edge falls on a candidate rank, plain thresholds already cut there
    assert np.mean(gains) > 0.2 and min(gains) > -0.05 and max(bounds) <= 1.0


def test_the_tie_break_is_a_named_stream_and_leaves_distinct_scores_alone() -> None:
    scores = np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    ranks = tie_broken(scores, 0, "scores")
    assert ranks is not None and sorted(ranks) == [0, 1, 2, 3, 4]
    assert np.all(ranks[scores == 1.0] > ranks[scores == 0.0].max())  # the order of distinct scores kept
    assert np.array_equal(ranks, tie_broken(scores, 0, "scores"))  # same seed, same order
    assert tie_broken(np.array([0.1, 0.3, 0.2]), 0, "scores") is None
