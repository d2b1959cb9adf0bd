"""A one-run audit's guesses, and Steinke, Nasr & Jagielski's p-value for them.

**Guess sets.** An auditor ranks the m canaries by score and, for each size k of a grid fixed by
m alone (:func:`guess_sizes`), guesses "in" for the k highest and "out" for the k lowest
(symmetric: r = 2k guesses), abstaining on the rest; where the claimed mechanism is subsampled
it also guesses "in" for the k highest alone (one-sided: r = k). Under Poisson sampling a
member canary that was never sampled looks like a non-member, which dilutes the "out" guesses
and not the "in" ones. Bonferroni across the sets keeps the level whatever set wins.

**Ties.** The canaries are ranked by (score, u), u uniform from the stream ``audit-tie-break``
named by the audit's seed and label (:func:`tie_break`), never by their row: with discrete scores
(randomized response's bits, a rounded Laplace count) a whole block ties, and a stable sort broke
it by row index, which reads the membership wherever the rows are grouped by it (a CSV sorted by
label). The theorem below holds for any guesser whose guesses are a function of the mechanism's
output and of coins drawn independently of the membership (Steinke, Nasr & Jagielski 2023, §3:
the auditor sees the output alone; its randomness is free). u is such coins: iid, drawn from a
stream that no row's membership names, and permuted with the rows it is laid beside it stays iid,
so the law of every guess set, and of the verdict, is the same for every order of the rows
(``tests/test_one_run_ties.py``). A seed chosen after seeing a verdict is not independent coins:
the seed is fixed before the audit.

**The (ε, δ) p-value** (Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training
Run", their main theorem with its δ term). If the mechanism is (ε, δ)-DP, then for r guesses, v
of them right,

    P[V ≥ v] ≤ β(v) + 2mδ · max_{1 ≤ i ≤ v} P[v − i ≤ B < v] / i,   B ~ Bin(r, e^ε / (1 + e^ε)),

with β(v) = P[B ≥ v] (:func:`p_value`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit
from scipy.stats import binom

from ...base.randomness import stream

#: the fewest canaries a one-run audit takes (its smallest guess set has MIN_GUESSES per side).
MIN_CANARIES = 20
MIN_GUESSES = 5
#: how many guess sizes k are tried (geometric from MIN_GUESSES or m/500 to m/2).
GUESS_SIZES = 8
#: the ε search's upper end and resolution.
EPSILON_MAX, EPSILON_TOLERANCE = 50.0, 1e-4


def p_values(canaries: int, guesses: int, correct: int, epsilons: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """The bound on P[V ≥ ``correct``] of ``guesses`` guesses among ``canaries`` under each
    (ε, δ) of a profile (the module's formula), evaluated for all of them at once: one binomial
    pmf matrix (profile points × i), not a scalar call per point (a one-run profile search asks
    tens of thousands)."""
    eps = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
    dls = np.broadcast_to(np.asarray(deltas, dtype=np.float64), eps.shape)
    q = expit(eps)
    tail = binom.sf(correct - 1, guesses, q)
    if correct == 0 or not np.any(dls > 0):
        return np.minimum(1.0, tail)
    # log P[B = correct − i], i = 1..correct, from log P[B = correct − 1] down the pmf's ratio
    # P[B = k − 1] / P[B = k] = k / (r − k + 1) · (1 − q)/q, and (1 − q)/q = e^−ε: one cumulative
    # sum of logs shared by every ε, then an outer sum, instead of a pmf call per (ε, i)
    k = np.arange(correct - 1, 0, -1, dtype=np.float64)  # k = correct − 1 … 1
    steps = np.concatenate([[0.0], np.cumsum(np.log(k) - np.log(guesses - k + 1))])
    i = np.arange(1, correct + 1)
    log_pmf = binom.logpmf(correct - 1, guesses, q)[:, None] + steps[None, :] - eps[:, None] * (i - 1)[None, :]
    below = np.cumsum(np.exp(log_pmf), axis=1)  # P[correct − i ≤ B < correct]
    return np.minimum(1.0, tail + 2 * canaries * dls * np.max(below / i, axis=1))


def p_value(canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """:func:`p_values` at one (ε, δ)."""
    return float(p_values(canaries, guesses, correct, np.array([epsilon]), np.array([delta]))[0])


def tie_break(canaries: int, seed: int, label: str) -> np.ndarray:
    """The u that ranks tied scores: one uniform per canary from the stream ``audit-tie-break``
    named by ``seed``, ``label`` and the count of canaries (same seed ⇒ same result)."""
    return stream(seed, "audit-tie-break", scores=label, canaries=canaries).numpy().random(canaries)


def tied(scores: np.ndarray) -> int:
    """How many canaries share their score with another (those whose rank :func:`tie_break` decides)."""
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    return int(np.sum(counts[inverse] > 1))


def guess_sizes(canaries: int) -> np.ndarray:
    """k of each guess set: geometric, fixed by the number of canaries alone."""
    low = max(MIN_GUESSES, canaries // 500)
    return np.unique(np.round(np.geomspace(low, canaries // 2, GUESS_SIZES)).astype(int))


@dataclass(frozen=True)
class GuessSets:
    """Every guess set of one audit: its guesses r, how many are right (v), and its side."""

    canaries: int
    guesses: np.ndarray
    correct: np.ndarray
    one_sided: np.ndarray  # True: "in" guesses only

    @classmethod
    def of(cls, scores: np.ndarray, membership: np.ndarray, u: np.ndarray, *, one_sided: bool) -> GuessSets:
        """The sets of canaries ranked by (``scores``, ``u``): ``u`` iid uniform, independent of
        ``membership`` (:func:`tie_break`), so tied scores are split at random, never by row."""
        order = np.lexsort((u, scores))
        inside = membership[order].astype(np.int64)
        top = np.cumsum(inside[::-1])  # members among the j highest, j = 1..m
        bottom = np.cumsum(1 - inside)  # non-members among the j lowest
        k = guess_sizes(len(scores))
        guesses, correct, side = [2 * k], [top[k - 1] + bottom[k - 1]], [np.zeros(len(k), dtype=bool)]
        if one_sided:
            guesses.append(k)
            correct.append(top[k - 1])
            side.append(np.ones(len(k), dtype=bool))
        return cls(len(scores), np.concatenate(guesses), np.concatenate(correct), np.concatenate(side))

    def __len__(self) -> int:
        return len(self.guesses)

    def pairs(self) -> list[tuple[int, int]]:
        return [(int(r), int(v)) for r, v in zip(self.guesses, self.correct, strict=True)]


def largest_rejected(canaries: int, guesses: int, correct: int, delta: float, alpha: float) -> float:
    """The largest ε whose (ε, δ) p-value is at most α (0 when even ε = 0 is not rejected)."""
    if p_value(canaries, guesses, correct, 0.0, delta) > alpha:
        return 0.0
    low, high = 0.0, 1.0
    while high < EPSILON_MAX and p_value(canaries, guesses, correct, high, delta) <= alpha:
        low, high = high, min(2 * high, EPSILON_MAX)
    while high - low > EPSILON_TOLERANCE:
        middle = (low + high) / 2
        low, high = (middle, high) if p_value(canaries, guesses, correct, middle, delta) <= alpha else (low, middle)
    return low
