"""Auditing scores from any stack: canary-in and canary-out scores in, certified bounds out, no I/O.

The attack (:mod:`.attack`) picks thresholds, the Clopper–Pearson points bound its error rates,
and the verdict compares them with the claim: the strict (ε, δ) bound against ε, and every CP
point against the claimed trade-off curve (:mod:`.profile`). The Gaussian (μ-GDP) numbers are a
bound only for full-batch mechanisms; under Poisson sampling they assume a Gaussian trade-off
that the subsampled mechanism does not have, and are labelled so (``gdp_is_bound``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import accounting
from ..errors import InputError, require
from ..randomness import stream
from .attack import STRATEGIES, AttackResult, attack
from .diagnostics import diagnose
from .profile import GaussianTradeOff, TradeOff, claimed_tradeoff, epsilon_lower_bound_profile


@dataclass(frozen=True)
class AuditResult:
    """What a membership attack on one set of scores certifies, at ``confidence``, about a claim."""

    runs: int  # canary-in plus canary-out scores
    epsilon_lower_bound: float  # strict (ε, δ) lower bound (Kairouz et al., Thm 2.1), at the strict threshold
    fpr_upper: float
    fnr_upper: float
    mu_lower_bound: float  # μ of the Gaussian trade-off the best CP point rules out
    epsilon_lower_bound_gdp: float  # μ_LB as (ε, δ): a bound only when gdp_is_bound
    gdp_is_bound: bool  # True for a full-batch claim; under Poisson sampling μ-GDP is an assumption
    epsilon_lower_bound_profile: float  # largest ε′ of the claim's σ-scaled curves the CP points violate (any q)
    claimed_mu: float | None  # the claim as μ-GDP (full batch only)
    profile_violation: bool  # a CP point lies below the claimed trade-off curve (rigorous, any q)
    gdp_fpr_upper: float
    gdp_fnr_upper: float
    threshold: float  # the strict bound's threshold ("score ≥ threshold" says "in")
    gdp_threshold: float
    candidate_thresholds: int  # the α was shared over this many (1 for split)
    counts: dict[str, int]  # fp, fn, negatives, positives at the strict threshold
    auroc: float
    auroc_ci: tuple[float, float]
    tpr_at_fpr: dict[str, float]
    violation: bool  # ε_LB above the claimed ε, or a profile violation

    def to_dict(self) -> dict[str, Any]:
        """audit.json's fields for one result (``exceeds_claim`` is ``violation``)."""
        data: dict[str, Any] = {
            "runs": self.runs,
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "fpr_upper": self.fpr_upper,
            "fnr_upper": self.fnr_upper,
            "mu_lower_bound": self.mu_lower_bound,
            "epsilon_lower_bound_gdp": self.epsilon_lower_bound_gdp,
            "gdp_is_bound": self.gdp_is_bound,
            "epsilon_lower_bound_profile": self.epsilon_lower_bound_profile,
            **({} if self.claimed_mu is None else {"claimed_mu": self.claimed_mu}),
            "profile_violation": self.profile_violation,
            "gdp_fpr_upper": self.gdp_fpr_upper,
            "gdp_fnr_upper": self.gdp_fnr_upper,
            "threshold": self.threshold,
            "gdp_threshold": self.gdp_threshold,
            "candidate_thresholds": self.candidate_thresholds,
            "counts": dict(self.counts),
            "auroc": self.auroc,
            "auroc_ci": list(self.auroc_ci),
            "tpr_at_fpr": dict(self.tpr_at_fpr),
        }
        return {**data, "exceeds_claim": self.violation}


def checked_scores(scores: npt.ArrayLike, name: str) -> np.ndarray:
    """One class's scores as a 1-D float array: finite, at least two (else one clear InputError)."""
    try:
        values = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be numbers") from None
    require(values.ndim == 1, f"{name} must be a 1-D array of scores, got shape {values.shape}")
    require(len(values) >= 2, f"{name} needs at least 2 scores, got {len(values)}")
    bad = int(np.sum(~np.isfinite(values)))
    require(bad == 0, f"{name}: {bad} of {len(values)} scores are NaN or infinite")
    return values


def checked_claim(
    epsilon: float,
    delta: float,
    phases: Sequence[accounting.GaussianPhase] | None,
    confidence: float,
    threshold: str,
) -> TradeOff:
    """The claimed trade-off curve, after checking every setting of the audit (one InputError for
    the first bad one)."""
    accounting.check_epsilon(epsilon)
    accounting.check_delta(delta)
    require(0 < confidence < 1, f"confidence must be in (0, 1), got {confidence}")
    require(threshold in STRATEGIES, f"unknown threshold strategy {threshold!r}; choose from {STRATEGIES}")
    return claimed_tradeoff(epsilon, delta, phases)


def analyse(
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    epsilon: float,
    delta: float,
    claimed: TradeOff,
    phases: Sequence[accounting.GaussianPhase] | None,
    confidence: float,
    threshold: str,
    seed: int,
    label: str,
) -> tuple[AuditResult, AttackResult]:
    """The result and the attack behind it (its thresholds and counted runs, for figures).

    Runs are in-scores then out-scores; ``split`` draws its SELECT half, and the AUROC bootstrap
    its resamples, from streams named by ``seed`` and ``label``. ``phases`` are the claim's
    Gaussian phases (None: a μ-GDP claim, the Gaussian numbers are then bounds).
    """
    gdp_is_bound = not phases or all(p.sample_rate == 1.0 for p in phases)
    scores = np.concatenate([scores_in, scores_out])
    include = np.arange(len(scores)) < len(scores_in)
    select = stream(seed, "audit-assignment", scores=label, runs=len(scores)).numpy().permutation(len(scores))
    found = attack(scores, include, select < len(scores) // 2, delta, confidence, threshold)
    diag = diagnose(scores_in, scores_out, stream(seed, "audit-bootstrap", scores=label))
    profile_violation = found.profile_violation(claimed)
    profile_bound = (
        found.epsilon_lower_bound_gdp
        if gdp_is_bound or not phases
        else epsilon_lower_bound_profile(
            phases, [p.fpr_upper for p in found.points], [p.fnr_upper for p in found.points], delta
        )
    )
    strict, gdp = found.strict, found.gdp
    result = AuditResult(
        runs=len(scores),
        epsilon_lower_bound=found.epsilon_lower_bound,
        fpr_upper=strict.fpr_upper,
        fnr_upper=strict.fnr_upper,
        mu_lower_bound=found.mu_lower_bound,
        epsilon_lower_bound_gdp=found.epsilon_lower_bound_gdp,
        gdp_is_bound=gdp_is_bound,
        epsilon_lower_bound_profile=profile_bound,
        claimed_mu=claimed.mu if isinstance(claimed, GaussianTradeOff) else None,
        profile_violation=profile_violation,
        gdp_fpr_upper=gdp.fpr_upper,
        gdp_fnr_upper=gdp.fnr_upper,
        threshold=strict.threshold,
        gdp_threshold=gdp.threshold,
        candidate_thresholds=found.candidates,
        counts={"fp": strict.fp, "fn": strict.fn, "negatives": strict.negatives, "positives": strict.positives},
        auroc=diag.auroc,
        auroc_ci=diag.auroc_ci,
        tpr_at_fpr=diag.tpr_at_fpr,
        violation=found.epsilon_lower_bound > epsilon or profile_violation,
    )
    return result, found


def audit_scores(
    in_scores: npt.ArrayLike,
    out_scores: npt.ArrayLike,
    *,
    epsilon: float,
    delta: float,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    confidence: float = 0.95,
    threshold: str = "bonferroni",
    seed: int = 0,
    label: str = "scores",
) -> AuditResult:
    """Audit a claimed (ε, δ) from membership scores (larger = canary more likely in).

    ``in_scores`` come from runs trained with the canary, ``out_scores`` from runs without it.
    ``phases`` are the mechanism's Gaussian phases (σ, q, T) as its accountant calibrated them:
    the claimed trade-off curve is then their PLD profile when any q < 1; without them, or at
    full batch, it is μ-GDP with μ from ε. ``seed`` and ``label`` name the streams the split
    strategy and the AUROC bootstrap draw from (same inputs, same result).
    """
    scores_in, scores_out = checked_scores(in_scores, "in_scores"), checked_scores(out_scores, "out_scores")
    claimed = checked_claim(epsilon, delta, phases, confidence, threshold)
    return analyse(scores_in, scores_out, epsilon, delta, claimed, phases, confidence, threshold, seed, label)[0]
