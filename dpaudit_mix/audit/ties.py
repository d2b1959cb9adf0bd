"""Tied scores in a random order: a discrete mechanism's scores (randomized response's 0/1)
audited by randomized threshold tests (:func:`tie_broken`), and the thresholds reported back in
the scores' own units (:func:`in_score_units`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..randomness import stream
from .attack import AttackResult, CPPoint, attack


def tie_broken(scores: np.ndarray, seed: int, label: str) -> np.ndarray | None:
    """Tied scores in a random order: each run's rank among all runs by (score, u), with u
    uniform from the stream named by ``seed`` and ``label`` (None when no two scores tie).

    A threshold on the ranks is a randomized test on the scores, "score > s, or score = s and
    u above a cut", which splits a tied value where a plain threshold must take all of it or
    none: with discrete scores (randomized response) the counted false positives then sit at
    the threshold's own rank, not below a whole tied block, and the CP bounds stay exact, for
    the ranks of the out-runs are distinct and the choice still depends on them alone. Sound
    as any test is: u is drawn independently of which runs hold the canary.
    """
    if len(np.unique(scores)) == len(scores):
        return None
    u = stream(seed, "audit-tie-break", scores=label, runs=len(scores)).numpy().random(len(scores))
    ranks = np.empty(len(scores))
    ranks[np.lexsort((u, scores))] = np.arange(len(scores), dtype=float)
    return ranks


def in_score_units(found: AttackResult, sorted_scores: np.ndarray) -> AttackResult:
    """``found``, counted on :func:`tie_broken` ranks, with each test's threshold as the score
    it splits at (the ranks at or above it begin with that score; its ties are split at random)."""
    top = len(sorted_scores) - 1

    def score(point: CPPoint) -> CPPoint:
        return replace(point, threshold=float(sorted_scores[min(int(np.ceil(point.threshold)), top)]))

    return replace(found, strict=score(found.strict), gdp=score(found.gdp), points=tuple(map(score, found.points)))


def attacked(
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    *,
    seed: int,
    label: str,
    delta: float,
    confidence: float,
    threshold: str,
) -> AttackResult:
    """The attack (:func:`.attack.attack`) on in-scores then out-scores, ties broken at random;
    ``split`` draws its SELECT half from a stream named by ``seed`` and ``label``."""
    scores = np.concatenate([scores_in, scores_out])
    include = np.arange(len(scores)) < len(scores_in)
    select = stream(seed, "audit-assignment", scores=label, runs=len(scores)).numpy().permutation(len(scores))
    ranked = tie_broken(scores, seed, label)
    found = attack(
        scores if ranked is None else ranked,
        include,
        select < len(scores) // 2,
        delta=delta,
        confidence=confidence,
        strategy=threshold,
    )
    if ranked is not None:
        found = in_score_units(found, np.sort(scores))
    return found
