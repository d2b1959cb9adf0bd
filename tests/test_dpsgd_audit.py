"""The pipeline's DP-SGD as audited mechanisms (audit/mechanisms/dpsgd.py) and the profile ε_LB."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix import accounting, cli
from dpaudit_mix.audit.many_run.engine import run_audit
from dpaudit_mix.audit.mechanisms.dpsgd import dirac_score
from dpaudit_mix.audit.profile import epsilon_lower_bound_profile, profile_tradeoff
from dpaudit_mix.audit.spec import AuditSpec
from dpaudit_mix.problem import Problem, save
from dpaudit_mix.verification.checks import dpsgd_probe_problem

from .conftest import random_problem


def _spec(mechanism: str, **overrides: object) -> AuditSpec:
    base: dict[str, object] = dict(
        mechanism=mechanism,
        problem="probe",
        task="probe",
        epsilon=16.0,
        rho=1.0,
        sample_rate=0.5,
        steps=2,
        clip=1.0,
        user_level=mechanism == "user-dpsgd",
        canaries=("max_clip",),
        runs=200,
    )
    return AuditSpec(**{**base, **overrides})  # type: ignore[arg-type]


def test_dirac_score_is_the_per_step_likelihood_ratio() -> None:
    x = np.array([0.3, -1.2, np.nan, 2.0])  # x_t σ, one skipped step
    sigma, q = 0.5, 0.25
    mu = 1 / sigma
    expected = sum(math.log(1 - q + q * math.exp(mu * v / sigma - mu**2 / 2)) for v in x[~np.isnan(x)])
    assert dirac_score(x, sigma, q) == pytest.approx(expected + math.log(1 - q))
    assert dirac_score(np.array([0.3, -1.2]), sigma, 1.0) == pytest.approx(
        sum(mu * v / sigma - mu**2 / 2 for v in (0.3, -1.2))
    )
    assert dirac_score(np.array([1.0, 0.0, np.nan, 1.0]), 0.0, q) == 2.0  # σ = 0: the canary's hits


@pytest.mark.parametrize("mechanism", ["opacus", "user-dpsgd"])
def test_the_canary_is_a_dirac_of_norm_c_and_the_honest_mechanism_passes(tmp_path: Path, mechanism: str) -> None:
    """σ = 0: a canary-out run releases exactly 0 in w and a canary-in run exactly C per step it
    was sampled in (so the white-box control score counts hits); σ calibrated: no violation, and
    the controls see the canary (not inconclusive)."""
    spec = _spec(mechanism, epsilon=2.0, steps=8)  # σ ≈ 3.1; a control misses the canary in 0.4% of runs
    outcome = run_audit(spec, tmp_path, progress=False, problem=dpsgd_probe_problem(), threads=1)
    control = outcome.attacks[("max_clip", "white_box", False)]
    assert np.all(control.scores_out == 0)
    hits = control.scores_in
    assert np.allclose(hits, np.round(hits), atol=1e-5) and hits.min() >= 0 and hits.max() <= 8
    assert abs(hits.mean() - 4.0) < 0.5  # q T = 4 expected hits
    summary = outcome.summary
    assert not summary.violation and not summary.inconclusive
    for r in summary.results:  # the profile bound: within the claim when private, beyond it at σ = 0
        assert (r.epsilon_lower_bound_profile <= 2.0) == r.noise
    assert summary.mechanism == mechanism and summary.problem["examples"] == 16


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(mechanism="user-dpsgd", problem="NO_USERS", user_level=True), "needs a problem with users"),
        (dict(mechanism="opacus", user_level=True), "example-level"),
        (dict(mechanism="user-dpsgd", user_level=False), "user-level"),
        (dict(mechanism="opacus", canaries=["natural", "max_clip"]), "Dirac canary only"),
        (dict(mechanism="opacus", sample_rate=0.3), "1/an integer"),
        (dict(mechanism="opacus", steps=3), "a multiple"),
        (dict(mechanism="sgd"), "unknown mechanism 'sgd'; known: dpmixmin, opacus, user-dpsgd"),
    ],
)
def test_a_mechanism_the_spec_contradicts_exits_2_and_writes_nothing(
    capsys, tmp_path: Path, overrides: dict, message: str
) -> None:
    keys = {"problem": "mnist", "task": "digit-0", "canaries": ["max_clip"], "sample_rate": 0.5, "steps": 2, "runs": 8}
    keys.update(overrides)
    if keys["problem"] == "NO_USERS":
        keys["problem"] = str(tmp_path / "p.npz")
        save(random_problem(40, 4, seed=3), keys["problem"])
    spec = tmp_path / "spec.toml"
    spec.write_text("\n".join(f"{k} = {_toml(v)}" for k, v in keys.items()) + "\n")
    out = tmp_path / "out"
    assert cli.main(["audit", str(spec), "--out", str(out)]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def test_epsilon_lower_bound_profile_recovers_the_curve_the_points_lie_on() -> None:
    """Points on the curve of σ′ (same q, T) violate every curve of smaller ε′ and none above ε(σ′):
    the bound lands just below ε(σ′), never above it; points above the claim's curve give 0."""
    claim = [accounting.GaussianPhase(1.0, 0.25, 20)]
    fpr = np.array([0.01, 0.05, 0.1, 0.2])
    for sigma in (0.8, 1.5):
        weaker = [accounting.GaussianPhase(sigma, 0.25, 20)]
        truth = accounting.epsilon(weaker, 1e-5)
        found = epsilon_lower_bound_profile(claim, fpr, profile_tradeoff(weaker).fnr_floor(fpr), 1e-5)
        assert 0.95 * truth <= found <= truth
    assert epsilon_lower_bound_profile(claim, [0.5], [0.6], 1e-5) == 0.0


def test_epsilon_lower_bound_profile_is_the_gdp_bound_at_full_batch() -> None:
    """q = 1: the σ-scaled curves are the Gaussian ones, so the bound is the GDP ε_LB."""
    from dpaudit_mix.audit.bounds import gdp_mu

    fpr, fnr = np.array([0.05]), np.array([0.3])
    mu = float(gdp_mu(fpr, fnr)[0])
    expected = accounting.gdp_epsilon_of_mu(mu, 1e-5)
    found = epsilon_lower_bound_profile([accounting.GaussianPhase(5.0, 1.0, 4)], fpr, fnr, 1e-5)
    assert 0.97 * expected <= found <= expected * 1.001


def test_user_level_dpsgd_divides_by_the_public_user_count() -> None:
    """An audit's canary-in run holds one user more than the public U: the divisor qU must stay U."""
    import torch

    from dpaudit_mix.audit.mechanisms.dpsgd import CANARY_CODE, UserProbe
    from dpaudit_mix.base.randomness import stream
    from dpaudit_mix.models import userdp

    canary = [torch.full((2, 5), CANARY_CODE, dtype=torch.int64)]  # one user: the canary, two windows
    for users, expected in ((None, -1.0), (10, -0.1)):  # −C / (q U), C = q = 1
        config = userdp.UserLevelSGD(1.0, 1, 0.0, 1.0, 0.1, users=users)
        probe = UserProbe(4.0)
        draws = stream(0, "finetune-batches", test="divisor")
        update = userdp.released_step(probe, canary, config, draws.numpy(), draws.numpy())
        assert float(update[0]) == pytest.approx(expected)  # w is the probe's first weight


@pytest.mark.parametrize("k", [47, 48])
def test_a_user_level_canary_that_is_not_isolated_is_refused_at_plan_time(k: int) -> None:
    """At k = 47 the canary's code collided with a real source's (1 + 46 = 47): the canary was no
    longer a coordinate no other user touches, and the audit reported as usual."""
    from dpaudit_mix.audit.mechanisms.dpsgd import UserDPSGDMechanism

    rng = np.random.default_rng(k)
    prob = Problem(
        np.log(rng.uniform(0.05, 1, (60, k))), tuple(f"s{i}" for i in range(k)), users=np.repeat(np.arange(20), 3)
    )
    spec = AuditSpec(
        mechanism="user-dpsgd",
        problem="p.npz",
        epsilon=4.0,
        rho=1.0,
        sample_rate=0.25,
        steps=4,
        user_level=True,
        canaries=("max_clip",),
        runs=64,
    )
    with pytest.raises(ValueError, match="the canary must be a code no other user's window holds"):
        UserDPSGDMechanism().plan(spec, prob, prob, None)
