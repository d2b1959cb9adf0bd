"""Tied scores are broken at random (a randomized threshold test): discrete scores certify
what their ROC allows, and an honest mechanism still passes at the level, by Monte Carlo."""

from __future__ import annotations

import numpy as np

from dpaudit_mix.audit.attack import attack, candidates
from dpaudit_mix.audit.many_run.scores import audit_scores
from dpaudit_mix.audit.many_run.sorted_scores import SortedScores
from dpaudit_mix.audit.many_run.ties import tie_broken, tie_broken_misses
from dpaudit_mix.base.randomness import stream

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


def test_the_sorted_tie_break_draws_the_misses_of_ranking_every_run() -> None:
    """tie_broken_misses draws each candidate's false negatives from their exact law: over 3,000
    draws its mean and variance at every candidate match ranking every run by (score, u) with u
    fresh each time (z-scores of the means below 4.5 at all candidates; variances within 15 %)."""
    rng = stream(0, "simulated-scores", test="ties-law").numpy()
    scores_in = rng.choice([0.0, 1.0, 2.0], size=50, p=[0.2, 0.3, 0.5])
    scores_out = rng.choice([0.0, 1.0, 2.0, 3.0], size=70, p=[0.4, 0.3, 0.2, 0.1])
    ordered = SortedScores.of(scores_in, scores_out)
    values, ranks = candidates(ordered.scores_out)
    assert np.any(np.isin(values, scores_in))  # some candidates sit in tied blocks holding in-runs
    draws = 3000
    law = np.array([tie_broken_misses(ordered, values, ranks, seed, "law") for seed in range(draws)])
    ranked = np.empty_like(law)
    for k in range(draws):
        u_in, u_out = rng.random(len(scores_in)), rng.random(len(scores_out))
        pairs = sorted(zip(scores_out, u_out, strict=True), reverse=True)
        for at, j in enumerate(ranks):
            v, u = pairs[j - 1]
            ranked[k, at] = np.sum((scores_in < v) | ((scores_in == v) & (u_in < u)))
    spread = np.sqrt((law.var(axis=0) + ranked.var(axis=0)) / draws)
    z = np.abs(law.mean(axis=0) - ranked.mean(axis=0)) / np.where(spread > 0, spread, 1)
    assert z.max() < 4.5
    varying = ranked.var(axis=0) > 0
    assert np.allclose(law.var(axis=0)[varying], ranked.var(axis=0)[varying], rtol=0.15)
    assert np.array_equal(law.var(axis=0) > 0, varying)  # fixed exactly where ranking fixes it
