"""The claim an audit tests, checked before anything runs: (ε, δ), the phases the mechanism ran
(whose ε must be their accountant's), and the curve it states. One InputError for the first thing
wrong; every audit (many-run, one-run, the engine's, the planner's) checks its claim here.

:class:`Claim` is the one value every public audit and testing function accepts (``claim=``; the
``epsilon=``/``delta=`` keywords build one), as dp_accounting's ``DpEvent`` is the one vocabulary
of its accountants: :meth:`Claim.from_dp_event` reads such an event, so a mechanism accounted there
is stated here in the same words."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import accounting
from ..base.errors import InputError, is_real, require
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


@dataclass(frozen=True)
class Claim:
    """A privacy claim: the mechanism is (ε, δ)-DP, and, with ``phases``, it is the composition of
    those Gaussian phases, whose whole trade-off curve is then claimed (ε must be what
    ``accountant`` gives them at δ); or, with ``curve="gdp"``, a μ-GDP mechanism. δ = 0 without
    phases is a pure-ε claim (the Laplace mechanism, randomized response).

    Args:
      epsilon: the claimed ε, in (0, 100].
      delta: the claimed δ, in [0, 1) (in (0, 1) with phases or a GDP curve).
      phases: the Gaussian phases (σ, q, T) the mechanism ran, or None for (ε, δ) alone (an
        empty sequence states no mechanism and is refused by :meth:`check`).
      curve: ``"gdp"`` to state a μ-GDP mechanism without phases, else None.
      accountant: the accountant that calibrated σ (``"pld"``, ``"prv"``, ``"rdp"`` or one
        registered).
    """

    epsilon: float
    delta: float
    phases: tuple[accounting.GaussianPhase, ...] | None = None
    curve: str | None = None
    accountant: str = accounting.DEFAULT_ACCOUNTANT

    def __post_init__(self) -> None:
        if self.phases is not None and not isinstance(self.phases, tuple):  # a list given: frozen, hashable
            require(
                isinstance(self.phases, Sequence) and not isinstance(self.phases, str),
                f"phases must be a sequence of GaussianPhase or None, got {type(self.phases).__name__}",
            )
            object.__setattr__(self, "phases", tuple(self.phases))

    def check(self) -> None:
        """Check the claim is one thing (:func:`check_claim`, :func:`claimed_curve`).

        Raises:
          InputError: naming the first field that is wrong.
        """
        check_claim(self.epsilon, self.delta, self.phases, self.accountant)
        claimed_curve(self.phases, self.curve, self.delta)

    @classmethod
    def from_dp_event(cls, event: Any, delta: float, *, accountant: str = accounting.DEFAULT_ACCOUNTANT) -> Claim:
        """The claim of a mechanism stated as a dp_accounting ``DpEvent``: a Gaussian (one step,
        q = 1), Poisson-sampled Gaussian, either self-composed, and compositions of these; ε is
        ``accountant``'s for the phases at ``delta``.

        Args:
          event: the ``DpEvent`` the mechanism was accounted as.
          delta: the claimed δ, in (0, 1).
          accountant: the accountant that gives ε for the event's phases.

        Returns:
          The checked claim, its phases the event's.

        Raises:
          InputError: an event of another kind (named), or a δ out of range.
        """
        require(is_real(delta) and 0 < delta < 1, f"delta must be in (0, 1), got {delta!r}")
        phases = tuple(_event_phases(event))
        claim = cls(accounting.epsilon(phases, delta, accountant), float(delta), phases, accountant=accountant)
        claim.check()
        return claim


def _event_phases(event: Any, count: int = 1) -> list[accounting.GaussianPhase]:
    """The Gaussian phases a DpEvent states (``count`` times over)."""
    import dp_accounting

    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        require(isinstance(event.count, int) and event.count >= 1, f"a self-composed count must be >= 1: {event!r}")
        return _event_phases(event.event, count * event.count)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        phases = [p for e in event.events for p in _event_phases(e)]
        require(bool(phases), f"a composed event of no mechanism states no claim: {event!r}")
        return phases * count
    q, inner = 1.0, event
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        q, inner = float(event.sampling_probability), event.event
    require(
        isinstance(inner, dp_accounting.GaussianDpEvent),
        "a claim reads Gaussian, Poisson-sampled Gaussian, self-composed and composed DpEvents, "
        f"not {type(inner).__name__}",
    )
    return [accounting.GaussianPhase(float(inner.noise_multiplier), q, count)]


def claim_of(
    claim: Claim | None,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    curve: str | None = None,
    accountant: str | None = None,
) -> Claim:
    """The checked claim of a call: ``claim``, or the one its loose keywords build (a shorthand).

    Raises:
      InputError: both or neither given, or a claim that is not one thing.
    """
    if claim is not None:
        require(isinstance(claim, Claim), f"claim must be a dpaudit_mix.Claim, got {type(claim).__name__}")
        loose = {"epsilon": epsilon, "delta": delta, "phases": phases, "curve": curve, "accountant": accountant}
        given = [name for name, value in loose.items() if value is not None]
        require(not given, f"give claim= or {', '.join(given)}=, not both (the claim holds them)")
    else:
        if epsilon is None or delta is None:
            raise InputError("state the claim: claim=Claim(...), or epsilon= and delta=")
        loose_phases = None if phases is None else tuple(phases)
        claim = Claim(epsilon, delta, loose_phases, curve, accountant or accounting.DEFAULT_ACCOUNTANT)
    claim.check()
    return claim


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
