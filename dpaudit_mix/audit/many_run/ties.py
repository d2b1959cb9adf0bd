"""Tied scores in a random order: a discrete mechanism's scores (randomized response's 0/1)
audited by randomized threshold tests (:func:`tie_broken`), and the thresholds reported back in
the scores' own units (:func:`in_score_units`). The default attack draws the same tests' counts
from their exact law on sorted scores instead (:func:`tie_broken_misses`), so it never ranks,
concatenates or permutes all the runs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...base.randomness import stream
from ..attack import THRESHOLDS, AttackResult, CPPoint, attack, attack_result, bonferroni, bonferroni_tests, candidates
from .sorted_scores import SortedScores


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


def tie_broken_misses(scores: SortedScores, values: np.ndarray, ranks: np.ndarray, seed: int, label: str) -> np.ndarray:
    """The false negatives of :func:`tie_broken`'s tests "rank ≥ the j-th largest out-run's"
    (``values`` those out-scores, ``ranks`` their j), drawn from their exact law without a rank.

    Only a block of tied scores that holds in-runs is split at random, and only at the out-runs
    the candidates name: with a in- and b out-runs tied at v, each run's u is uniform, so the
    i-th largest of the b out-u's is Beta(b − i + 1, i), the ones below it are uniform under it,
    and the in-runs' u's fall between consecutive candidates as sequential binomials. Each
    candidate's count is then "in below v" plus "tied in with u below its out-run's u": the same
    law as ranking every run (``tests/test_ties.py`` checks it by Monte Carlo), from one stream
    named as :func:`tie_broken`'s.
    """
    s_in, s_out = scores.scores_in, scores.scores_out
    below = np.searchsorted(s_in, values, "left")
    tied_in = np.searchsorted(s_in, values, "right") - below
    out_above = len(s_out) - np.searchsorted(s_out, values, "right")
    tied_out = len(s_out) - out_above - np.searchsorted(s_out, values, "left")
    misses = below.copy()
    split = np.flatnonzero(tied_in > 0)
    if len(split) == 0:
        return misses
    source = stream(seed, "audit-tie-break", scores=label, runs=len(s_in) + len(s_out)).numpy()
    for value in np.unique(values[split]):
        at = split[values[split] == value]
        at = at[np.argsort(ranks[at])]  # the block's candidates, largest out-run first
        b, a = int(tied_out[at[0]]), int(tied_in[at[0]])
        cut, outs_below, done, ins_left, top, ins_above = 1.0, b, 0, a, 1.0, 0
        for k in at:
            d = int(ranks[k] - out_above[k]) - done  # this candidate is the d-th largest out-u below the last
            cut *= source.beta(outs_below - d + 1, d)
            outs_below, done = outs_below - d, done + d
            passed = int(source.binomial(ins_left, (top - cut) / top))  # tied in-runs with u in (cut, top]
            ins_above, ins_left, top = ins_above + passed, ins_left - passed, cut
            misses[k] = below[k] + a - ins_above
    return misses


def sorted_bonferroni(scores: SortedScores, *, seed: int, label: str, delta: float, confidence: float) -> AttackResult:
    """The bonferroni attack with :func:`tie_broken`'s randomized tests, on sorted scores: its
    candidates, FP by rank, FN by :func:`tie_broken_misses`; each threshold is the score the test
    splits at (ties there split at random), or just above it where no in-run ties it."""
    values, ranks = candidates(scores.scores_out)
    misses = tie_broken_misses(scores, values, ranks, seed, label)
    tied = np.searchsorted(scores.scores_in, values, "right") > np.searchsorted(scores.scores_in, values, "left")
    thresholds = np.where(tied, values, np.nextafter(values, np.inf))
    n_in, n_out = len(scores.scores_in), len(scores.scores_out)
    return attack_result(
        "bonferroni",
        bonferroni_tests(thresholds, ranks - 1, misses, n_out, n_in, delta=delta, confidence=confidence),
        delta,
    )


def attacked(
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    *,
    seed: int,
    label: str,
    delta: float,
    confidence: float,
    threshold: str,
) -> tuple[AttackResult, SortedScores]:
    """The attack (:func:`.attack.attack`) on in-scores then out-scores, ties broken at random, and
    the scores sorted (the one copy an analysis makes; its diagnostics read it too). The package's
    bonferroni counts on that copy alone (:func:`sorted_bonferroni`); ``split`` draws its SELECT
    half from a stream named by ``seed`` and ``label``."""
    ordered = SortedScores.of(scores_in, scores_out)
    if THRESHOLDS.get(threshold) is bonferroni:
        return sorted_bonferroni(ordered, seed=seed, label=label, delta=delta, confidence=confidence), ordered
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
    return found, ordered
