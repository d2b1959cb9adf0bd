"""Auditing scores from any stack: canary-in and canary-out scores in, certified bounds out, no I/O.

The attack (:mod:`.attack`) picks thresholds, the Clopper–Pearson points bound its error rates,
and the verdict compares them with the claim: the strict (ε, δ) bound against ε, and every CP
point against the claimed trade-off curve (:mod:`.profile`) — where a curve was claimed: the
phases' PLD profile, or ``curve="gdp"`` (the caller states the mechanism is μ-GDP). Without
either the claim is (ε, δ) alone and the verdict rests on the strict bound only; the μ-GDP curve
of ε is then a *comparison* (``gdp_comparison``), never a violation: a correct pure-ε mechanism
(Laplace, randomized response) lies below it. The Gaussian (μ-GDP) numbers are a
bound only for a mechanism the caller states is full batch; under Poisson sampling (or unstated)
they assume a Gaussian trade-off the mechanism may not have, and are labelled so
(``gdp_is_bound``). Each verdict names the test that fired (:func:`.words.verdict_line`), and each
result states its power: what an attack with no error could certify from as many runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ... import accounting
from ...base import npz
from ...base.errors import InputError, require
from ..accounted import Accounted
from ..attack import AttackResult
from ..bounds import strict_epsilon
from ..claim import Claim, checked_claim, claim_of, claimed_curve
from ..power import Power, PowerClaim, caught, power_claim, power_of, unsimulated
from ..profile import GaussianTradeOff, TradeOff, epsilon_lower_bound_profile
from .diagnostics import diagnose
from .ties import attacked

#: why the Gaussian reading of a result is a diagnostic: its curve is assumed, not claimed.
GDP_NOT_A_BOUND = (
    "the mu-GDP curve is the mechanism's own only where every phase is stated full batch (q = 1); here it is "
    "assumed, so mu_LB and its epsilon bound nothing (a correct Laplace mechanism or randomized response reads "
    "above its own epsilon); at delta = 0 no mu-GDP epsilon exists (None)"
)
#: what a result's verdict says, in the order they outrank each other.
VERDICTS = ("epsilon_violated", "curve_violated", "none")
#: what the claim's curve is: the phases' PLD profile, a μ-GDP curve the caller stated, or none
#: (the claim is (ε, δ) alone).
CURVES = ("phases", "gdp", "none")


@dataclass(frozen=True)
class AuditResult:
    """What a membership attack on one set of scores certifies, at ``confidence``, about a claim
    (the fields below carry the verdict; audit.json's reference gives every one).

    Attributes:
      epsilon_lower_bound: ε_LB, the strict bound on the (ε, δ) claim itself.
      epsilon_violation: ε_LB above ε: no (ε, δ)-DP mechanism could have produced these counts.
      profile_violation: the claimed *mechanism*'s curve (μ-GDP, or its phases' PLD profile) is
        rejected; it may still be (ε, δ)-DP (a Laplace mechanism at pure ε is, and fails it).
      epsilon_lower_bound_profile: the ε of the σ-scaled family of the claimed mechanism it
        rejects (not the ε of an arbitrary one).
      violation: either violation.
    """

    runs: int  # canary-in plus canary-out scores
    epsilon_lower_bound: float  # strict (ε, δ) lower bound (Kairouz et al., Thm 2.1), at the strict threshold
    fpr_upper: float
    fnr_upper: float
    mu_lower_bound: float  # μ of the Gaussian trade-off the best CP point rules out
    epsilon_lower_bound_gdp: float  # μ_LB as (ε, δ): a bound only when gdp_is_bound
    gdp_is_bound: bool  # True only when the caller states every phase is full batch (q = 1)
    epsilon_lower_bound_profile: float  # largest ε′ of the claim's σ-scaled curves the CP points violate
    claimed_mu: float | None  # the claim as μ-GDP (full batch only)
    profile_violation: bool  # a CP point lies below the claimed trade-off curve: not the claimed mechanism
    gdp_fpr_upper: float
    gdp_fnr_upper: float
    threshold: float  # the strict bound's threshold ("score ≥ threshold" says "in")
    gdp_threshold: float
    candidate_thresholds: int  # the α was shared over this many (1 for split)
    counts: dict[str, int]  # fp, fn, negatives, positives at the strict threshold
    auroc: float
    auroc_ci: tuple[float, float]
    tpr_at_fpr: dict[str, float]
    epsilon_violation: bool  # the strict ε_LB exceeds the claimed ε: (ε, δ) itself is violated
    epsilon_lower_bound_max: float  # power: the strict ε_LB of an attack with no error on these runs
    curve_detectable: bool  # power: that error-free attack's CP point lies below the claimed curve
    warnings: tuple[str, ...]  # what makes silence weak evidence (a worse-than-chance attack, no power)
    control: AuditResult | None  # the σ = 0 control's result, when its scores were given
    violation: bool  # epsilon_violation or profile_violation
    curve: str  # the claimed curve the curve test used (CURVES; "none": no curve test)
    #: without a claimed curve: whether a CP point lies below the μ-GDP curve of ε (a comparison
    #: with an assumed Gaussian shape, never a violation); None where a curve was claimed
    gdp_comparison: bool | None
    #: what this audit's power rests on (:mod:`.power`; None where it is not simulated): the power
    #: itself is computed when first asked (:attr:`power`), so audits that never report it pay nothing
    power_claim: PowerClaim | None = field(repr=False, compare=False)
    #: every score is one value, or the in and out scores are the same multiset: no attack on them
    #: can see anything, so silence is no evidence (the verdict is inconclusive)
    no_information: bool
    #: the accountant behind the claimed ε and its figure for the phases (set by :class:`Audited`)
    accounted: Accounted | None = field(default=None, compare=False, kw_only=True)
    #: why no power is reported (:func:`.power.unsimulated`; None where it is)
    power_unsimulated: str | None = field(default=None, compare=False, kw_only=True)
    #: the claim tested: its ε and δ
    epsilon: float = field(kw_only=True)
    delta: float = field(kw_only=True)

    def summary(self) -> str:
        """The result in one line: the verdict and the test that fired, ε_LB against the claim,
        and what the audit could have caught (what ``print(result)`` shows)."""
        verdict = {"epsilon_violated": "VIOLATION (ε violated)", "curve_violated": "VIOLATION (curve violated)"}.get(
            self.verdict, "INCONCLUSIVE (the attack is blind)" if self.inconclusive else "no violation"
        )
        profile = "" if self.curve == "none" else f", profile ε_LB {self.epsilon_lower_bound_profile:.3f}"
        return (
            f"{verdict}: ε_LB {self.epsilon_lower_bound:.3f} (strict{profile}) against the claimed ε {self.epsilon:g} "
            f"at δ {self.delta:g}, from {self.runs} runs; this size {caught(self.power, self.power_unsimulated)}"
        )

    def __str__(self) -> str:
        return self.summary()

    @property
    def verdict(self) -> str:
        """One of :data:`VERDICTS`: the strongest claim the counts support."""
        return "epsilon_violated" if self.epsilon_violation else "curve_violated" if self.profile_violation else "none"

    @property
    def power(self) -> Power | None:
        """What an audit of this size could show: the exactly-claimed mechanism's ε_LB and the
        smallest leak caught (:func:`.power.power_of`, cached per claim)."""
        return power_of(self.power_claim)

    @property
    def inconclusive(self) -> bool:
        """The scores carry no information, or a σ = 0 control was given and even it stays within
        the claim: the attack is blind."""
        return self.no_information or (self.control is not None and not self.control.violation)

    def gdp_reading(self) -> dict[str, Any]:
        """The Gaussian (μ-GDP) numbers: μ_LB, its ε at δ (None where unbounded: at δ = 0), their
        CP point and threshold, and, without phases, the comparison with the μ-GDP curve of ε and
        the μ-GDP family's ε_LB (what ``epsilon_lower_bound_profile`` is there). Bounds only where
        :attr:`gdp_is_bound`."""
        epsilons = {"epsilon_lower_bound_gdp": self.epsilon_lower_bound_gdp}
        if self.curve != "phases":
            epsilons["epsilon_lower_bound_profile"] = self.epsilon_lower_bound_profile
        return {
            "mu_lower_bound": self.mu_lower_bound,
            **{key: float(value) if np.isfinite(value) else None for key, value in epsilons.items()},
            "gdp_fpr_upper": self.gdp_fpr_upper,
            "gdp_fnr_upper": self.gdp_fnr_upper,
            "gdp_threshold": self.gdp_threshold,
            **({} if self.gdp_comparison is None else {"gdp_comparison": self.gdp_comparison}),
        }

    def to_dict(self) -> dict[str, Any]:
        """audit.json's fields for one result (``exceeds_claim`` is ``violation``). Every figure at
        the top level is a bound for the claim; the Gaussian reading of a claim the package cannot
        know is Gaussian lives under ``diagnostics``, labelled with why it is not one."""
        reading = self.gdp_reading()
        data: dict[str, Any] = {
            "runs": self.runs,
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "fpr_upper": self.fpr_upper,
            "fnr_upper": self.fnr_upper,
            **(reading if self.gdp_is_bound else {}),
            "gdp_is_bound": self.gdp_is_bound,
            **({"epsilon_lower_bound_profile": self.epsilon_lower_bound_profile} if self.curve == "phases" else {}),
            **({} if self.claimed_mu is None else {"claimed_mu": self.claimed_mu}),
            "profile_violation": self.profile_violation,
            "epsilon_violation": self.epsilon_violation,
            "verdict": self.verdict,
            "curve": self.curve,
            "epsilon_lower_bound_max": self.epsilon_lower_bound_max,
            "curve_detectable": self.curve_detectable,
            "warnings": list(self.warnings),
            "threshold": self.threshold,
            "candidate_thresholds": self.candidate_thresholds,
            "counts": dict(self.counts),
            "auroc": self.auroc,
            "auroc_ci": list(self.auroc_ci),
            "tpr_at_fpr": dict(self.tpr_at_fpr),
            "power": None if self.power is None else self.power.to_dict(),
            "power_unsimulated": self.power_unsimulated,
            **({} if self.accounted is None else {"accounted": self.accounted.to_dict()}),
        }
        if not self.gdp_is_bound:
            data["diagnostics"] = {"gdp_reading": {**reading, "not_a_bound": GDP_NOT_A_BOUND}}
        if self.control is not None:
            data["control"] = self.control.to_dict()
        if self.control is not None or self.no_information:
            data |= {"inconclusive": self.inconclusive, "no_information": self.no_information}
        return {**data, "exceeds_claim": self.violation}


def checked_scores(scores: npt.ArrayLike, name: str) -> np.ndarray:
    """One class's scores as a 1-D float array: finite, at least two (else one clear InputError)."""
    try:
        raw = np.asarray(scores)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be numbers") from None
    values = npz.numeric(raw, name)
    require(values.ndim == 1, f"{name} must be a 1-D array of scores, got shape {values.shape}")
    require(len(values) >= 2, f"{name} needs at least 2 scores, got {len(values)}")
    bad = int(np.sum(~np.isfinite(values)))
    require(bad == 0, f"{name}: {bad} of {len(values)} scores are NaN or infinite")
    return values


def full_batch(phases: Sequence[accounting.GaussianPhase] | None) -> bool:
    """Whether the caller stated that every phase is full batch: only then is the Gaussian (μ-GDP)
    curve the mechanism's own, and μ_LB a bound. Without phases the package cannot know."""
    return bool(phases) and all(p.sample_rate == 1.0 for p in phases or ())


def _warnings(
    blind: bool, auroc: float, epsilon: float, max_epsilon: float, detectable: bool, curve: str
) -> tuple[str, ...]:
    said = ["the scores carry no information; the attack sees nothing"] if blind else []
    if auroc < 0.5:
        said.append(
            f"AUROC {auroc:.3f} is below 1/2: the attack does worse than chance (are the scores' signs flipped? "
            "larger must mean 'canary in'); its silence proves nothing"
        )
    if curve == "none":
        if max_epsilon <= epsilon:
            said.append(
                f"with this many runs the strict bound cannot exceed {max_epsilon:.3f} <= the claimed epsilon, and no "
                "curve was claimed: the audit cannot fail"
            )
    elif not detectable:
        said.append("with this many runs no attack can fall below the claimed curve: the audit cannot fail")
    elif max_epsilon <= epsilon:
        said.append(
            f"with this many runs the strict bound cannot exceed {max_epsilon:.3f} <= the claimed epsilon: "
            "only the curve test can fire"
        )
    return tuple(said)


#: what :func:`analyse` does, in order: the threshold attack and its bounds, the AUROC and TPRs, the
#: claimed curve's test and the profile bound.
STEPS = ("attack", "diagnostics", "profile")


def analyse(
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    claimed: TradeOff,
    phases: Sequence[accounting.GaussianPhase] | None,
    confidence: float,
    threshold: str,
    seed: int,
    label: str,
    step: Callable[[str], None] | None = None,
    curve: str | None = None,
) -> tuple[AuditResult, AttackResult]:
    """The result and the attack behind it (its thresholds and counted runs, for figures); ``step``
    hears of each of its :data:`STEPS` as it starts; ``curve="gdp"``: without phases, the caller
    states the mechanism is μ-GDP (else the claim is (ε, δ) alone). Runs are in-scores then
    out-scores (:func:`.ties.attacked`); ``confidence`` holds for this one result (an audit of several
    shares its α over them)."""
    tell, stated = step or (lambda name: None), claimed_curve(phases, curve, delta)
    tell(STEPS[0])
    found, ordered = attacked(
        scores_in, scores_out, seed=seed, label=label, delta=delta, confidence=confidence, threshold=threshold
    )
    tell(STEPS[1])
    diag = diagnose(ordered)
    tell(STEPS[2])
    below_curve = found.profile_violation(claimed)
    profile_violation = below_curve and stated != "none"  # a verdict only on a curve that was claimed
    perfect = found.perfect_point()
    max_epsilon = float(strict_epsilon(*perfect, delta))
    detectable = stated != "none" and bool(np.any(claimed.violated(np.array([perfect[0]]), np.array([perfect[1]]))))
    strict, gdp = found.strict, found.gdp
    epsilon_violation, blind = found.epsilon_lower_bound > epsilon, ordered.no_information()
    result = AuditResult(
        runs=len(scores_in) + len(scores_out),
        epsilon_lower_bound=found.epsilon_lower_bound,
        fpr_upper=strict.fpr_upper,
        fnr_upper=strict.fnr_upper,
        mu_lower_bound=found.mu_lower_bound,
        epsilon_lower_bound_gdp=found.epsilon_lower_bound_gdp,
        gdp_is_bound=full_batch(phases),
        epsilon_lower_bound_profile=_profile_bound(found, phases, delta),
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
        epsilon_violation=epsilon_violation,
        epsilon_lower_bound_max=max_epsilon,
        curve_detectable=detectable,
        warnings=_warnings(blind, diag.auroc, epsilon, max_epsilon, detectable, stated),
        no_information=blind,
        control=None,
        violation=epsilon_violation or profile_violation,
        curve=stated,
        gdp_comparison=below_curve if stated == "none" and delta > 0 else None,  # the μ-GDP curve of ε
        power_claim=power_claim(
            epsilon,
            delta,
            phases=phases,
            claimed=claimed,
            stated=stated,
            runs_in=len(scores_in),
            runs_out=len(scores_out),
            confidence=confidence,
            threshold=threshold,
        ),
        power_unsimulated=unsimulated(tuple(phases or ()), len(scores_in) + len(scores_out), threshold),
        epsilon=float(epsilon),
        delta=float(delta),
    )
    return result, found


def _profile_bound(found: AttackResult, phases: Sequence[accounting.GaussianPhase] | None, delta: float) -> float:
    """The σ-scaled family's ε_LB of the claimed phases (μ_LB as ε where the Gaussian curve is theirs)."""
    if not phases or full_batch(phases):
        return found.epsilon_lower_bound_gdp
    return epsilon_lower_bound_profile(
        phases, [p.fpr_upper for p in found.points], [p.fnr_upper for p in found.points], delta
    )


def with_control(result: AuditResult, control: AuditResult) -> AuditResult:
    """``result`` with its σ = 0 control's result (``analyse`` of the control's scores, under the
    label :func:`control_label`): a control that stays within the claim makes it inconclusive."""
    return replace(result, control=control)


@dataclass(frozen=True)
class Audited:
    """What one audit analyses each pair of scores against: the claim (ε, δ, its trade-off curve
    and phases), the level, the threshold strategy, and the seed that names its streams."""

    epsilon: float
    delta: float
    claimed: TradeOff
    phases: Sequence[accounting.GaussianPhase] | None
    confidence: float
    threshold: str
    seed: int
    accountant: str = accounting.DEFAULT_ACCOUNTANT

    def scored(
        self,
        scores: dict[str, np.ndarray],
        label: str,
        *,
        step: Callable[[str], None] | None = None,
        curve: str | None = None,
    ) -> tuple[AuditResult, AttackResult]:
        """:func:`analyse` of ``scores``' in and out scores and, where it holds ``control_in``
        and ``control_out``, of the σ = 0 control's too (the result then says if it is blind);
        the private result's attack."""
        claim: dict[str, Any] = {
            f: getattr(self, f) for f in ("epsilon", "delta", "claimed", "phases", "confidence", "threshold")
        }
        named: dict[str, Any] = {"seed": self.seed, "step": step, "curve": curve}
        result, found = analyse(scores["in_scores"], scores["out_scores"], **claim, **named, label=label)
        if "control_in" in scores:
            control = analyse(scores["control_in"], scores["control_out"], **claim, **named, label=control_label(label))
            result = with_control(result, control[0])
        accounted = Accounted.of(self.epsilon, self.delta, self.phases, self.accountant)
        return replace(result, accounted=accounted), found


def control_label(label: str) -> str:
    """The streams a control's analysis draws from: its own, beside its private result's."""
    return f"{label}-control"


def audit_scores(
    in_scores: npt.ArrayLike,
    out_scores: npt.ArrayLike,
    *,
    claim: Claim | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    confidence: float = 0.95,
    threshold: str = "bonferroni",
    seed: int = 0,
    label: str = "scores",
    control_in: npt.ArrayLike | None = None,
    control_out: npt.ArrayLike | None = None,
    accountant: str | None = None,
    curve: str | None = None,
) -> AuditResult:
    """Audit a claimed (ε, δ) from membership scores (larger = canary more likely in).

    With phases (σ, q, T as their accountant calibrated them) the claimed trade-off curve is
    their PLD profile (μ-GDP when every q = 1). Without, the verdict rests on the strict bound
    and the μ-GDP curve of ε is reported as ``gdp_comparison`` only, unless ``curve="gdp"``
    states the mechanism is μ-GDP (then it is tested; ``gdp_is_bound`` stays False: the package
    cannot know it). A control (σ = 0 runs) that stays within the claim makes the result
    ``inconclusive``.

    Args:
      in_scores: one score per run trained with the canary (finite reals).
      out_scores: one score per run trained without it.
      claim: the claim tested (:class:`~.claim.Claim`); or state it by the keywords below.
      epsilon: the claimed ε (with ``delta``, ``phases``, ``curve``, ``accountant``: a Claim).
      delta: the claimed δ.
      phases: the Gaussian phases the mechanism ran.
      confidence: the level of the lower bound.
      threshold: the threshold strategy (``bonferroni``, ``split`` or one registered).
      seed: names the stream the split strategy draws from (same inputs, same result).
      label: names the audit (and its stream).
      control_in: the same attack's in-scores on σ = 0 runs (with ``control_out``).
      control_out: its out-scores on σ = 0 runs.
      accountant: the accountant that calibrated σ (default PLD).
      curve: ``"gdp"`` to state a μ-GDP mechanism.

    Returns:
      The :class:`AuditResult`.

    Raises:
      InputError: a bad score array, claim or setting (one line naming it).
    """
    claim = claim_of(claim, epsilon=epsilon, delta=delta, phases=phases, curve=curve, accountant=accountant)
    epsilon, delta, phases, curve, accountant = claim.epsilon, claim.delta, claim.phases, claim.curve, claim.accountant
    scores_in, scores_out = checked_scores(in_scores, "in_scores"), checked_scores(out_scores, "out_scores")
    require((control_in is None) == (control_out is None), "give control_in and control_out together, or neither")
    controls = None
    if control_in is not None and control_out is not None:
        controls = checked_scores(control_in, "control_in"), checked_scores(control_out, "control_out")
    claimed = checked_claim(
        epsilon, delta, phases=phases, confidence=confidence, threshold=threshold, accountant=accountant
    )
    pairs = {"in_scores": scores_in, "out_scores": scores_out}
    if controls is not None:
        pairs.update(control_in=controls[0], control_out=controls[1])
    audited = Audited(epsilon, delta, claimed, phases, confidence, threshold, seed, accountant)
    return audited.scored(pairs, label, curve=curve)[0]
