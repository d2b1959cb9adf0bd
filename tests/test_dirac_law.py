"""The Dirac score's law over T steps (:func:`.dirac.score_law`): its draws against the step-by-step
simulation it stands in for past MAX_DIRAC_DRAWS, its moments against quadrature, and the power it
gives against the direct one."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ks_2samp

from dpaudit_mix import accounting
from dpaudit_mix.audit.dirac import _Component, score_law, simulated_scores
from dpaudit_mix.audit.one_run import power as one_run_power_module
from dpaudit_mix.audit.one_run.power import one_run_power, one_run_power_claim
from dpaudit_mix.base.randomness import stream

N = 4000
DELTA = 1e-5


def _both(sigma: float, q: float, steps: int, leak: float, member: bool, case: str) -> tuple[np.ndarray, np.ndarray]:
    """N scores drawn step by step and N drawn from the law, each from its own named stream."""
    membership = np.full(N, member)

    def scores(how: str, max_draws: int) -> np.ndarray:
        source = stream(0, "simulated-scores", test="dirac-law", case=case, how=how).numpy()
        return simulated_scores(membership, sigma, q, steps, leak, source, max_draws=max_draws)

    return scores("direct", N * steps), scores("law", 0)


@pytest.mark.parametrize(
    ("sigma", "q", "steps", "leak", "member"),
    [(1.0, 0.1, 50, 1.0, True), (1.0, 0.1, 50, 1.0, False), (0.5, 0.02, 100, 2.0, True), (3.0, 0.3, 30, 1.5, False)],
)
def test_law_draws_match_the_step_by_step_scores(sigma: float, q: float, steps: int, leak: float, member: bool) -> None:
    direct, law = _both(sigma, q, steps, leak, member, f"{sigma}-{q}-{steps}-{leak}-{member}")
    assert ks_2samp(direct, law).pvalue > 1e-3


def test_a_law_at_another_leak_is_told_apart() -> None:
    """The negative control: the same KS test rejects the law of σ/1.5 against the claimed mechanism's
    scores, so the agreement above is evidence and not a test too weak to fail."""
    membership = np.ones(N, dtype=bool)
    source = stream(0, "simulated-scores", test="dirac-law", case="control").numpy()
    direct = simulated_scores(membership, 1.0, 0.1, 50, 1.0, source, max_draws=N * 50)
    other = score_law(1.0, 0.1, 50, 1.5, True).draw(N, source)
    assert ks_2samp(direct, other).pvalue < 1e-6


@pytest.mark.parametrize("member", [True, False])
def test_the_law_keeps_the_sums_mean_and_sd(member: bool) -> None:
    """Mean and sd of the T-step sum, from the lattice law, against T × one step's quadrature
    moments: the tent rule keeps the mean; the sd moves by under 1 % (the garbling's h²/6 a step)."""
    sigma, q, steps, leak = 1.31, 0.01, 3000, 1.0
    out, sampled = (_Component(1 / sigma, float(np.log(q / (1 - q))), c, 1 / leak) for c in (0.0, 1 / sigma))
    (m0, s0), (m1, s1) = out.moments(), sampled.moments()
    w = q if member else 0.0
    mean = (1 - w) * m0 + w * m1
    var = (1 - w) * s0 + w * s1 - mean**2
    law = score_law(sigma, q, steps, leak, member)
    values = law.low + np.arange(len(law.mass)) * law.width
    law_mean = float(law.mass @ values)
    law_sd = float(np.sqrt(law.mass @ (values - law_mean) ** 2 + law.width**2 / 12))
    sd = np.sqrt(steps * var)
    assert abs(law_mean - steps * (mean + np.log1p(-q))) < 1e-3 * sd
    assert law_sd == pytest.approx(sd, rel=1e-2)


def test_the_power_from_the_law_agrees_with_the_direct_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small subsampled claim's one-run power, simulated step by step and from the law: each
    median ε_LB lies in the other's 10–90 % band."""
    phase = accounting.GaussianPhase(1.0, 0.1, 20)
    claim = one_run_power_claim(
        accounting.epsilon([phase], DELTA), DELTA, phases=[phase], canaries=500, confidence=0.95
    )
    found = {}
    for how, cap in (("direct", 500 * 20), ("law", 0)):
        monkeypatch.setattr(one_run_power_module, "MAX_DIRAC_DRAWS", cap)
        one_run_power_module._power.cache_clear()
        found[how] = one_run_power(claim)
    one_run_power_module._power.cache_clear()
    direct, law = found["direct"], found["law"]
    assert direct is not None and law is not None
    assert law.band[0] <= direct.tight_lower_bound <= law.band[1]
    assert direct.band[0] <= law.tight_lower_bound <= direct.band[1]
