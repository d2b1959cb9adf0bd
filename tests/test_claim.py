"""One claim value: ``dm.Claim`` states (ε, δ, phases or curve, accountant) once; every audit and
check takes it as ``claim=``, and a dp_accounting DpEvent states the same claim in that library's
words."""

from __future__ import annotations

import dp_accounting
import pytest

import dpaudit_mix as dm
from dpaudit_mix import accounting
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.testing import check_mechanism

DELTA = 1e-5
PHASE = accounting.GaussianPhase(1.1, 0.01, 300)


def test_a_poisson_sampled_gaussian_self_composed_is_the_claim_of_its_phases() -> None:
    """dp_accounting's own PLD accountant, composing the event, gives the ε of the equivalent
    phases: the event and the phases are one claim."""
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 300
    )
    claim = dm.Claim.from_dp_event(event, DELTA)
    library = dp_accounting.pld.PLDAccountant()
    library.compose(event)
    assert claim.phases == (PHASE,) and claim.delta == DELTA and claim.accountant == "pld"
    assert claim.epsilon == pytest.approx(library.get_epsilon(DELTA), rel=1e-3)
    assert claim.epsilon == pytest.approx(accounting.epsilon([PHASE], DELTA), rel=1e-9)


def test_composed_events_are_their_phases_in_order() -> None:
    full = dp_accounting.GaussianDpEvent(3.0)
    sampled = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.5))
    event = dp_accounting.ComposedDpEvent([full, dp_accounting.SelfComposedDpEvent(sampled, 20)])
    claim = dm.Claim.from_dp_event(event, DELTA)
    assert claim.phases == (accounting.GaussianPhase(3.0, 1.0, 1), accounting.GaussianPhase(1.5, 0.1, 20))


@pytest.mark.parametrize(
    ("event", "said"),
    [
        (dp_accounting.LaplaceDpEvent(1.0), "not LaplaceDpEvent"),
        (dp_accounting.ComposedDpEvent([]), "a composed event of no mechanism"),
        (dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.LaplaceDpEvent(1.0)), "not LaplaceDpEvent"),
    ],
)
def test_an_event_it_cannot_read_is_refused_by_name(event: object, said: str) -> None:
    with pytest.raises(InputError, match=said):
        dm.Claim.from_dp_event(event, DELTA)


def test_every_audit_takes_claim_and_the_keywords_are_its_shorthand() -> None:
    """The same claim by ``claim=`` and by keywords gives the same verdict; both at once, or
    neither, is one InputError; a claim that is not one thing is refused by its check."""
    draws = stream(0, "simulated-scores", test="claim").numpy()
    member, other = draws.normal(size=400) + 0.2, draws.normal(size=400)
    claim = dm.Claim(accounting.epsilon([PHASE], DELTA), DELTA, [PHASE])
    assert isinstance(claim.phases, tuple) and hash(claim) == hash(dm.Claim(claim.epsilon, DELTA, (PHASE,)))
    by_claim = dm.audit_scores(member, other, claim=claim)
    by_words = dm.audit_scores(member, other, epsilon=claim.epsilon, delta=DELTA, phases=[PHASE])
    assert by_claim.to_dict() == by_words.to_dict()
    membership = (draws.random(400) < 0.5).astype(int)
    one = dm.audit_one_run(member, membership, claim=claim, seed=3)
    assert (
        one.to_dict()
        == dm.audit_one_run(member, membership, epsilon=claim.epsilon, delta=DELTA, phases=[PHASE], seed=3).to_dict()
    )
    assert dm.plan_audit(claim=dm.Claim(2.0, DELTA)) == dm.plan_audit(2.0, DELTA)
    with pytest.raises(InputError, match="give claim= or epsilon=, not both"):
        dm.audit_scores(member, other, claim=claim, epsilon=1.0)
    with pytest.raises(InputError, match="state the claim"):
        dm.audit_one_run(member, membership, delta=DELTA)
    with pytest.raises(InputError, match="is not what the phases spend"):
        dm.audit_scores(member, other, claim=dm.Claim(claim.epsilon / 2, DELTA, (PHASE,)))
    with pytest.raises(InputError, match="phases must be a sequence of GaussianPhase or None, got int"):
        dm.Claim(1.0, DELTA, 10)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"claim must be a dpaudit_mix\.Claim"):
        dm.audit_one_run(member, membership, claim=(1.0, DELTA))


def test_check_mechanism_takes_a_claim() -> None:
    """The Gaussian mechanism at σ for (1, 1e-5), checked by claim: it passes."""
    sigma = accounting.calibrate(1.0, DELTA, 1.0, 1)
    noise = stream(0, "simulated-scores", test="claim-mechanism").numpy()
    report = check_mechanism(
        lambda d: d + sigma * noise.normal(),
        (0.0, 1.0),
        claim=dm.Claim.from_dp_event(dp_accounting.GaussianDpEvent(sigma), DELTA),
        runs=200,
    )
    assert report.passed and report.details["runs"] == 200
