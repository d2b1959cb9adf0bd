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

import numpy as np

from ..randomness import RandomSource


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


def simulated_released(
    membership: np.ndarray, sigma: float, sample_rate: float, steps: int, source: RandomSource
) -> np.ndarray:
    """What ``len(membership)`` Dirac canaries release, exactly, under the claimed mechanism:
    (m, T) values x_t σ, each canary sampled at rate q in the steps where it is a member. The
    ground truth a one-run audit's level and power are measured on."""
    member = np.asarray(membership, dtype=bool)[:, None]
    sampled = member & (source.random((len(member), steps)) < sample_rate)
    return (sampled / sigma + source.standard_normal((len(member), steps))) * sigma
