"""Each class's scores sorted once, and what the analysis reads from them in chunks.

The default attack's counts, the AUROC with its interval, the TPRs and the no-information test all
rest on order alone, so one sorted copy of each class serves them all: an audit of 10⁸ scores a
class then holds the scores it was given and one sorted copy, never a concatenation, a ranking or
a permutation of all the runs (``bench/score_memory.py`` measures the peak against the data).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

#: scores read at a time by a chunked pass: its temporaries stay near 2²⁰ × 8 bytes each.
CHUNK = 1 << 20


@dataclass(frozen=True)
class SortedScores:
    """Canary-in and canary-out scores, each sorted ascending (build with :meth:`of`)."""

    scores_in: np.ndarray
    scores_out: np.ndarray

    @classmethod
    def of(cls, scores_in: np.ndarray, scores_out: np.ndarray) -> SortedScores:
        """Sorted copies: the caller's arrays are left as they were."""
        return cls(np.sort(scores_in), np.sort(scores_out))

    def no_information(self) -> bool:
        """All scores one value, or in and out the same multiset: no test can tell them apart."""
        s_in, s_out = self.scores_in, self.scores_out
        if min(s_in[0], s_out[0]) == max(s_in[-1], s_out[-1]):
            return True
        if len(s_in) != len(s_out) or s_in[0] != s_out[0] or s_in[-1] != s_out[-1]:
            return False
        return all(np.array_equal(a, b) for a, b in zip(chunks(s_in), chunks(s_out), strict=True))


def chunks(values: np.ndarray) -> Iterator[np.ndarray]:
    """``values`` as views of at most CHUNK entries, in order."""
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


def mean_and_variance(parts: Iterator[np.ndarray]) -> tuple[float, float]:
    """Mean and sample variance (ddof = 1; inf below two values) of the concatenated
    ``parts``, one part in memory at a time: each part's mean and squared deviations merged
    exactly (Chan, Golub & LeVeque 1983, eq. 2.1), where Σx² − (Σx)²/n would cancel."""
    count, mean, squares = 0, 0.0, 0.0
    for part in parts:
        n, m = len(part), float(part.mean())
        total = count + n
        squares += float(np.sum((part - m) ** 2)) + (m - mean) ** 2 * count * n / total
        mean += (m - mean) * n / total
        count = total
    return mean, (squares / (count - 1) if count > 1 else np.inf)
