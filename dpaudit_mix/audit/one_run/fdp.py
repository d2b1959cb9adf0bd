"""The f-DP one-run test (Mahloujifar, Melis & Chaudhuri, "Auditing f-Differential Privacy in
One Run", ICML 2025): the recursive bound of their main theorem for a guessing game with k = 2
answers ("in", "out") and abstention, against a whole trade-off curve f.

Setting as in :mod:`.one_run`: m canaries, each in with probability ½; from the output alone an
auditor guesses on r of them and is right on v. The test needs f only through its *inverse
blow-up* f̄⁻¹(y): the least probability an event can have without a canary when it has
probability y with it, for a mechanism whose trade-off curve is at least f (f̄ = 1 − f is the
largest power at a given false-positive rate, so f̄⁻¹(y) = min{α : 1 − f(α) ≥ y}). At level τ the
theorem runs, from i = v down to 0,

    r_v = τ·v/m,   h_v = τ·(r − v)/m,
    h_i = max(h_{i+1}, f̄⁻¹(r_{i+1})),   r_i = r_{i+1} + i/(r − i) · (h_i − h_{i+1}),

and when r_0 + h_0 > r/m no f-DP mechanism makes v or more correct guesses with probability τ
or more: P[V ≥ v] < τ, and v correct guesses reject f at level τ. (r_i and h_i are lower bounds
on the probability mass of right and wrong guesses that the event "at least v right" forces on
an average canary; together they cannot exceed the r/m of the canaries guessed on.)

Curves here (each a *family* of candidates tested at once, one column each):

- :class:`GaussianCurves`: μ-GDP, f̄⁻¹(y) = Φ(Φ⁻¹(y) − μ) (Dong, Roth & Su 2019, Def. 2.7);
- :class:`LineCurves`: the curve of a privacy profile given as points (ε_j, δ_j) — one point for
  an (ε, δ) claim, the PLD profile for subsampled phases. f is the maximum of the lines
  1 − δ_j − e^{ε_j}α and e^{−ε_j}(1 − δ_j − α) (Dong, Roth & Su, Prop. 2.12), so f̄⁻¹ is the
  maximum of their inverses, max_j max((y − δ_j)e^{−ε_j}, 1 − δ_j − e^{ε_j}(1 − y)). A
  pessimistic δ_j only lowers f̄⁻¹ and so never rejects a true curve.

Soundness is checked by Monte Carlo on honest Gaussian, Laplace and randomized-response scores
(``tests/test_fdp.py`` at small size, ``bench/one_run_fdp.py`` at m = 10⁴).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from scipy.special import ndtr, ndtri

#: a claimed privacy profile as curve points: this many points of its PLD profile (a subset: a
#: curve through fewer points lies lower, so it stays a valid null), down to δ(ε′) = PROFILE_FLOOR.
PROFILE_GRID, PROFILE_FLOOR = 64, 1e-12
#: the largest ε a line may have (e^ε stays finite; such a line is the axes already).
EPSILON_CAP = 600.0


class Curves(Protocol):
    """A family of trade-off curves, one per column: what :func:`rejects` tests."""

    @property
    def size(self) -> int: ...

    def inverse_blow_up(self, y: np.ndarray) -> np.ndarray:
        """f̄⁻¹ of each column's curve at ``y`` (shape (..., size))."""
        ...


@dataclass(frozen=True)
class GaussianCurves:
    """μ-GDP curves, one per μ."""

    mus: np.ndarray

    @property
    def size(self) -> int:
        return len(self.mus)

    def inverse_blow_up(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(ndtr(ndtri(np.minimum(y, 1.0)) - self.mus))


@dataclass(frozen=True)
class LineCurves:
    """Curves of privacy profiles: row c of ``epsilons`` and ``deltas`` (shape (size, points))
    holds curve c's points (ε_j, δ_j), each ε_j at most EPSILON_CAP (e^ε stays finite)."""

    epsilons: np.ndarray
    deltas: np.ndarray
    _grow: np.ndarray = field(init=False, repr=False, compare=False)  # e^ε
    _shrink: np.ndarray = field(init=False, repr=False, compare=False)  # e^−ε

    def __post_init__(self) -> None:
        e = np.minimum(np.asarray(self.epsilons, dtype=float), EPSILON_CAP)
        object.__setattr__(self, "_grow", np.exp(e))
        object.__setattr__(self, "_shrink", np.exp(-e))

    @classmethod
    def approximate(cls, epsilons: np.ndarray, delta: float) -> LineCurves:
        """The (ε′, δ) curves of ε′ in ``epsilons``, one δ."""
        e = np.asarray(epsilons, dtype=float)[:, None]
        return cls(e, np.full_like(e, delta))

    @property
    def size(self) -> int:
        return len(self.epsilons)

    def inverse_blow_up(self, y: np.ndarray) -> np.ndarray:
        y = np.minimum(y, 1.0)[..., None]
        d = self.deltas
        lines = np.maximum((y - d) * self._shrink, (1 - d) - self._grow * (1 - y))
        return np.maximum(lines.max(axis=-1), 0.0)


def rejects(curves: Curves, canaries: int, guesses: np.ndarray, correct: np.ndarray, level: float) -> np.ndarray:
    """Whether guess set s (``guesses[s]`` guesses, ``correct[s]`` right, among ``canaries``)
    rejects curve c at ``level``: a (sets, curves) array (the module's recursion, all at once).

    The sets run in order of v, largest first, so that at step i the sets still running (v > i)
    are a prefix of the rows (growing as i falls), updated in place; once no running set's h
    moves, none ever will until the next set starts, and the loop jumps there."""
    v = np.asarray(correct, dtype=np.int64)
    order = np.argsort(-v, kind="stable")
    v_sorted = v[order]
    r = np.asarray(guesses, dtype=float)[order][:, None]
    m = float(canaries)
    right = np.broadcast_to(level * v_sorted[:, None] / m, (len(v), curves.size)).copy()
    wrong = np.broadcast_to(level * (r - v_sorted[:, None]) / m, right.shape).copy()
    running = 0
    i = int(v.max(initial=0)) - 1
    while i >= 0:
        while running < len(v) and v_sorted[running] > i:  # the sets whose recursion has reached i
            running += 1
        a, h = right[:running], wrong[:running]
        grown = np.maximum(h, curves.inverse_blow_up(a))
        if np.array_equal(grown, h):
            # a fixed point: h_i = h_{i+1} leaves r_i = r_{i+1}, so every later step is the same
            # until another set starts (at i = its v − 1), or to the end
            if running == len(v):
                break
            i = int(v_sorted[running]) - 1
            continue
        a += i / (r[:running] - i) * (grown - h)  # r − i ≥ 1 wherever i < v ≤ r
        h[...] = grown
        i -= 1
    found = np.empty_like(right, dtype=bool)
    found[order] = right + wrong > r / m
    return found
