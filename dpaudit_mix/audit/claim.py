"""The claim an audit tests, checked before anything runs: (ε, δ), the phases the mechanism ran
(whose ε must be their accountant's), and the curve it states. One InputError for the first thing
wrong; every audit (many-run, one-run, the engine's, the planner's) checks its claim here."""

from __future__ import annotations

from collections.abc import Sequence

from .. import accounting
from ..errors import is_real, require
from .attack import THRESHOLDS
from .profile import TradeOff, claimed_tradeoff

#: how far the stated ε may sit from the calibrating accountant's ε of the stated phases: our
#: calibration lands in [0.99 ε, ε] (verify-accountant's round trip), Opacus' within 0.01 of ε.
CLAIM_ABS_TOLERANCE, CLAIM_REL_TOLERANCE = 0.01, 0.01


def check_claim(
    epsilon: float,
    delta: float,
    phases: Sequence[accounting.GaussianPhase] | None,
    accountant: str = accounting.DEFAULT_ACCOUNTANT,
) -> None:
    """The claim is one thing: with phases, the stated ε must be ``accountant``'s ε for them (the
    accountant that calibrated σ; accountants disagree most at large ε: Opacus' PRV puts ε = 16
    where PLD puts 10.8).

    Otherwise a call labelled ε = 1 would test the curve of phases worth ε = 97 (or flag a
    "violation" of ε = 50 by phases worth 2). Without phases δ = 0 is a pure-ε claim (the
    Laplace mechanism, randomized response); a Gaussian mechanism's phases need δ > 0.
    ``phases=[]`` states no mechanism and is refused (None is the claim without phases)."""
    accounting.check_epsilon(epsilon)
    require(
        phases is None or len(phases) > 0,
        "phases=[] states no mechanism: give the phases the mechanism ran, or None for an (epsilon, delta) claim alone",
    )
    accounting.check_accountant(accountant)
    if not phases:
        require(is_real(delta) and 0 <= delta < 1, f"delta must be in [0, 1) (0: a pure-epsilon claim), got {delta!r}")
        return
    require(
        is_real(delta) and 0 < delta < 1,
        f"delta must be in (0, 1) for a claim with phases (no Gaussian mechanism is pure epsilon-DP), got {delta!r}",
    )
    spent = accounting.epsilon(phases, delta, accountant)
    require(
        abs(spent - epsilon) <= CLAIM_ABS_TOLERANCE + CLAIM_REL_TOLERANCE * epsilon,
        f"the claimed epsilon {epsilon:g} is not what the phases spend: the {accountant} "
        f"accountant gives epsilon {spent:.4g} at delta {delta:g} for "
        + "; ".join(f"sigma {p.noise_multiplier:.4g}, q {p.sample_rate:g}, T {p.steps}" for p in phases)
        + " (state the epsilon the mechanism was calibrated to, and its phases)",
    )


def claimed_curve(phases: Sequence[accounting.GaussianPhase] | None, curve: str | None, delta: float) -> str:
    """Which curve the claim states (:data:`.scores.CURVES`): the phases', a stated μ-GDP one, or none."""
    require(curve in (None, "gdp"), f"curve must be 'gdp' or left out, got {curve!r}")
    require(not (phases and curve), "give phases (their PLD profile is the curve) or curve='gdp', not both")
    require(
        not (curve and delta == 0), "curve='gdp' states a mu-GDP mechanism, which is never pure epsilon-DP: delta > 0"
    )
    return "phases" if phases else ("gdp" if curve == "gdp" else "none")


def checked_claim(
    epsilon: float,
    delta: float,
    *,
    phases: Sequence[accounting.GaussianPhase] | None,
    confidence: float,
    threshold: str,
    accountant: str = accounting.DEFAULT_ACCOUNTANT,
) -> TradeOff:
    """The claimed trade-off curve (the μ-GDP curve of ε without phases: the claim's, with
    ``curve="gdp"``, else only a comparison), after checking every setting of the audit (one
    InputError for the first bad one)."""
    require(0 < confidence < 1, f"confidence must be in (0, 1), got {confidence}")
    THRESHOLDS.get(threshold)
    check_claim(epsilon, delta, phases, accountant)
    return claimed_tradeoff(epsilon, delta, phases)
