"""The Dirac canary's white-box score, and its exact distribution under a claimed mechanism.

A Dirac canary's clipped gradient is C on a coordinate no other example touches (Nasr et al.
2023). Released per step is the noisy sum's value there over C: x_t σ with x_t ~ N(μ b_t, 1),
μ = 1/σ, b_t = 1 when the canary was sampled (Poisson, rate q). The white-box score of a run is
the log-likelihood ratio of every step,

    Σ_t log((1 − q) + q · exp(μ x_t − μ²/2)),

the Neyman–Pearson test of the claimed subsampled Gaussian; a step skipped for an empty batch
(NaN) tells that the canary was out (log(1 − q)). At σ = 0 (a control) it is the canary's hits.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.fft import irfft, next_fast_len, rfft
from scipy.integrate import quad
from scipy.special import ndtr

from ..base.randomness import RandomSource


def dirac_scores(released: np.ndarray, sigma: float, sample_rate: float) -> np.ndarray:
    """The white-box score of each row of ``released`` ((runs or canaries, T): x_t σ, NaN where
    the step was skipped)."""
    values = np.atleast_2d(np.asarray(released, dtype=float))
    skipped = np.isnan(values)
    if sigma == 0:
        return np.where(skipped, 0.0, values).sum(axis=1)
    mu = 1 / sigma
    log_miss = np.log1p(-sample_rate) if sample_rate < 1 else -np.inf
    with np.errstate(invalid="ignore"):
        terms = np.logaddexp(log_miss, np.log(sample_rate) + mu * values / sigma - mu**2 / 2)
    return np.where(skipped, log_miss, terms).sum(axis=1)


def simulated_scores(
    membership: np.ndarray,
    sigma: float,
    sample_rate: float,
    steps: int,
    leak: float,
    source: RandomSource,
    *,
    max_draws: int,
) -> np.ndarray:
    """The white-box scores (by the claimed σ and q) of Dirac canaries released by the mechanism
    run with σ/``leak``: step by step (:func:`simulated_released`) while canaries × steps ≤
    ``max_draws``, else each canary's score from its law (:func:`score_law`) at O(1) a canary."""
    member = np.asarray(membership, dtype=bool)
    if len(member) * steps <= max_draws:
        return dirac_scores(simulated_released(member, sigma / leak, sample_rate, steps, source), sigma, sample_rate)
    scores = np.empty(len(member))
    for side in (True, False):
        scores[member == side] = score_law(sigma, sample_rate, steps, leak, side).draw(
            int((member == side).sum()), source
        )
    return scores


def simulated_released(
    membership: np.ndarray, sigma: float, sample_rate: float, steps: int, source: RandomSource
) -> np.ndarray:
    """What ``len(membership)`` Dirac canaries release, exactly, under the claimed mechanism:
    (m, T) values x_t σ, each canary sampled at rate q in the steps where it is a member. The
    ground truth a one-run audit's level and power are measured on."""
    member = np.asarray(membership, dtype=bool)[:, None]
    sampled = member & (source.random((len(member), steps)) < sample_rate)
    return (sampled / sigma + source.standard_normal((len(member), steps))) * sigma


# --- the score's law over T steps, for simulations past direct draws -------------------------
#
# A simulated audit of a realistic DP-SGD (q = 0.01, T = 3000) cannot draw every canary's every
# step (10⁴ canaries × 3000 steps × 20 runs × the leaks). It need not: a canary's score is a sum
# of T iid terms log(1 − q) + Y, Y = softplus(μ x − μ²/2 + logit q), x ~ N(b μ, 1/c²) (b ~
# Bernoulli(q) for a member, 0 otherwise; c the leak: the mechanism runs σ/c while the auditor
# scores by the claimed σ). Y is monotone in x, so each of the two components (b = 0, b = 1) has
# a closed-form CDF. Each is put on one lattice of width h by the mean-preserving (tent) rule, a
# cell's mass split between its two ends so that its mean is kept: the rounding is a zero-mean
# garbling of each step, which can only hide membership, never invent it. The T-fold convolution
# is one FFT raised to the power T. Draws cost O(1) per canary at any T.

#: lattice points per standard deviation of a non-member's Y: the garbling adds at most 1/(2·RESOLUTION)
#: of the non-member score's sd, at any T (members and non-members share the lattice and its error).
RESOLUTION = 100
#: the sum's window, in its standard deviations either side of its mean (doubled until its outer
#: fiftieths hold under EDGE_MASS: mass past the window would wrap round the FFT's circle).
WINDOW, EDGE_MASS = 16.0, 1e-9
#: the most lattice points a law may take (2²⁴ float64: 128 MiB) and one step's Y may span: a claim
#: that needs more (σ ≲ 0.2, T ~ 10⁶) gets a coarser lattice, more garbling, a power no higher than
#: its own. x's reach in its sds, and Simpson's sub-intervals per cell.
MAX_LAW_POINTS, MAX_STEP_POINTS, REACH, SIMPSON = 1 << 24, 1 << 22, 10.0, 8


@dataclass(frozen=True)
class _Component:
    """One step's Y given b: x ~ N(``centre``, ``spread``²), centre = b μ."""

    mu: float  # 1/σ, the claimed
    logit: float  # log(q / (1 − q))
    centre: float
    spread: float  # 1/c

    def y(self, x: np.ndarray | float) -> np.ndarray:
        return np.logaddexp(0.0, self.mu * np.asarray(x) - self.mu**2 / 2 + self.logit)

    def standardised(self, y: np.ndarray) -> np.ndarray:
        """(x − centre)/spread for the x with Y(x) = y: x = (log(eʸ − 1) − logit q + μ²/2)/μ."""
        with np.errstate(divide="ignore"):
            x = (np.log(-np.expm1(-y)) + y - self.logit + self.mu**2 / 2) / self.mu
        return (x - self.centre) / self.spread

    def support(self) -> tuple[float, float]:
        """Y's range but for Φ(−REACH) ≈ 10⁻²³ of mass on each side."""
        return float(self.y(self.centre - REACH * self.spread)), float(self.y(self.centre + REACH * self.spread))

    def moments(self) -> tuple[float, float]:
        """E[Y] and E[Y²], by quadrature against x's Gaussian."""
        c, s = self.centre, self.spread
        return tuple(
            quad(
                lambda x, k=k: float(self.y(x)) ** k * np.exp(-(((x - c) / s) ** 2) / 2) / (s * np.sqrt(2 * np.pi)),
                c - 1.5 * REACH * s,
                c + 1.5 * REACH * s,
                epsabs=0.0,
                epsrel=1e-11,
                limit=200,
            )[0]
            for k in (1, 2)
        )

    def tent(self, first: int, points: int, width: float) -> np.ndarray:
        """The masses at the lattice points (first + i)·h, i < ``points``: cell [a, b)'s mass P goes
        to b by its mean position, ∫(t − a)/h dF = F(b) − ∫F/h = ∫S/h − S(b) (integration by
        parts: F below the median, the survival S above, so no mass is a difference of near-ones)."""
        t = (first + np.arange((points - 1) * SIMPSON + 1) / SIMPSON) * width
        z = self.standardised(t)
        below, above = ndtr(z), ndtr(-z)
        weights = np.array([1, *([4, 2] * (SIMPSON // 2))][:SIMPSON] + [1]) / (3 * SIMPSON)
        cells = np.lib.stride_tricks.sliding_window_view
        mean_below = cells(below, SIMPSON + 1)[::SIMPSON] @ weights  # ∫F/h over each cell
        mean_above = cells(above, SIMPSON + 1)[::SIMPSON] @ weights
        lower = below[:-1:SIMPSON] < 0.5
        cell = np.where(
            lower, below[SIMPSON::SIMPSON] - below[:-1:SIMPSON], above[:-1:SIMPSON] - above[SIMPSON::SIMPSON]
        )
        up = np.clip(
            np.where(lower, below[SIMPSON::SIMPSON] - mean_below, mean_above - above[SIMPSON::SIMPSON]), 0, cell
        )
        mass = np.zeros(points)
        mass[:-1] += cell - up
        mass[1:] += up
        mass[0] += below[0]  # below the lattice (≈ 10⁻²³)
        mass[-1] += above[-1]
        return mass


@dataclass(frozen=True)
class ScoreLaw:
    """A canary's T-step Dirac score: ``mass[i]`` at low + i·width, drawn with a uniform ±width/2."""

    low: float
    width: float
    mass: np.ndarray

    def draw(self, n: int, source: RandomSource) -> np.ndarray:
        cumulative = np.cumsum(self.mass)
        point = np.minimum(
            np.searchsorted(cumulative, source.random(n) * cumulative[-1], side="right"), len(self.mass) - 1
        )
        return self.low + (point + source.random(n) - 0.5) * self.width


@lru_cache(maxsize=64)
def _lattice(sigma: float, sample_rate: float, steps: int, leak: float) -> tuple[float, int, np.ndarray, np.ndarray]:
    """The lattice (h, its first point) and one step's masses on it, for b = 0 and b = 1."""
    mu, logit = 1 / sigma, float(np.log(sample_rate) - np.log1p(-sample_rate))
    out, sampled = (_Component(mu, logit, centre, 1 / leak) for centre in (0.0, mu))
    (out_mean, out_square), (in_mean, in_square) = out.moments(), sampled.moments()
    member_var = (
        (1 - sample_rate) * out_square
        + sample_rate * in_square
        - ((1 - sample_rate) * out_mean + sample_rate * in_mean) ** 2
    )
    (bottom, _), (_, top) = out.support(), sampled.support()
    width = max(
        np.sqrt(max(out_square - out_mean**2, 0.0)) / RESOLUTION,
        (top - bottom) / MAX_STEP_POINTS,
        8 * WINDOW * np.sqrt(steps * member_var) / MAX_LAW_POINTS,  # room for two widenings
    )
    first = int(np.floor(bottom / width))
    points = int(np.ceil(top / width)) - first + 1
    return width, first, out.tent(first, points, width), sampled.tent(first, points, width)


@lru_cache(maxsize=64)
def score_law(sigma: float, sample_rate: float, steps: int, leak: float, member: bool) -> ScoreLaw:
    """The law of the white-box score (:func:`dirac_scores`, by the claimed σ and q) of a canary
    released by the mechanism run with σ/``leak``, a member (sampled at rate q) or not, over T steps."""
    width, first, out, sampled = _lattice(sigma, sample_rate, steps, leak)
    step = (1 - sample_rate) * out + sample_rate * sampled if member else out
    at = first + np.arange(len(step))  # the lattice points' indices: values at·h
    mean = float(step @ at)
    centre, spread = steps * mean, np.sqrt(steps * float(step @ (at - mean) ** 2))
    ends, reach = (steps * first, steps * int(at[-1])), WINDOW
    while True:
        low, high = (
            max(int(np.floor(centre - reach * spread)), ends[0]),
            min(int(np.ceil(centre + reach * spread)), ends[1]),
        )
        points = next_fast_len(high - low + 1, real=True)
        if points > MAX_LAW_POINTS:
            raise RuntimeError(f"the score law of T = {steps} steps spreads past {MAX_LAW_POINTS:,} lattice points")
        folded = np.bincount(at % points, weights=step, minlength=points)
        mass = np.roll(np.clip(irfft(rfft(folded) ** steps, points), 0.0, None), -(low % points))
        edge = max(1, points // 50)
        if (low == ends[0] or mass[:edge].sum() < EDGE_MASS) and (high == ends[1] or mass[-edge:].sum() < EDGE_MASS):
            break
        reach *= 2
    return ScoreLaw(low=low * width + steps * float(np.log1p(-sample_rate)), width=width, mass=mass / mass.sum())
