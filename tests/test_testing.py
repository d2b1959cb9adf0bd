"""dpaudit_mix.testing: the user's test file of docs/testing.md passes as written, and each of
the field's bugs planted in it fails the matching check with its one-line reason."""

from __future__ import annotations

import math
import re
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from opacus.accountants import PRVAccountant, RDPAccountant
from scipy import stats
from statsmodels.stats.proportion import proportion_confint
from torch.utils.data import DataLoader, WeightedRandomSampler

from dpaudit_mix import accounting
from dpaudit_mix.base.randomness import stream, torch_scope
from dpaudit_mix.testing import CheckFailed, Point, check_accountant, check_dpsgd, check_mechanism
from dpaudit_mix.testing.accountant import DEFAULT_GRID
from dpaudit_mix.testing.dpsgd import ProbeRun, _runs_to_detect
from dpaudit_mix.testing.signal import Recorded, SignalTest, signal_test

from .conftest import scale_added_noise

DOC = Path(__file__).resolve().parents[1] / "docs" / "testing.md"
#: the small size the tests run check_dpsgd at (its default size is the bench's).
SMALL = {"canaries": 1000, "examples": 2000, "runs": 2}


def _user_file() -> types.ModuleType:
    """The python block of docs/testing.md, as the user's module."""
    block = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    module = types.ModuleType("user_privacy_tests")
    exec(compile(block.group(1), str(DOC), "exec"), module.__dict__)
    return module


USER = _user_file()


def _dpsgd(setup, name: str, **sizes):
    """check_dpsgd at the small size, memberships and torch's draws (Opacus' sampler and noise)
    from named streams, so that the test is one fixed experiment."""
    with torch_scope(stream(0, "synthetic-inputs", test="testing", setup=name)):
        return check_dpsgd(setup, source=stream(0, "canary-membership", test="testing", setup=name).numpy(), **sizes)


def _failing(setup, name: str) -> str:
    with pytest.raises(CheckFailed) as failed:
        _dpsgd(setup, name, **SMALL)
    return str(failed.value)


def test_the_users_file_passes_as_written():
    USER.test_my_accountant()
    report = _dpsgd(USER.my_setup, "correct", **SMALL)
    assert report.passed and {c.where for c in report.cases} >= {"one-run audit", "signal to noise", "normaliser"}
    assert 0.7 < report.details["signal_ratio"] < 1.3
    # the check says where its line lies: at this size (σ = 1, q = 0.1, 10 steps, 2 × 1000 canaries)
    assert report.details["detects"] == 1.5 and report.details["runs"] == 2
    assert "at this size it catches σ/1.5 with 90%" in next(c.why for c in report.cases if c.where == "signal to noise")


@pytest.mark.parametrize("leak", [1.0, 1.25, 1.5])
def test_the_signal_tests_power_is_its_flag_rate_by_monte_carlo(leak: float) -> None:
    """SignalTest.power against the flag rate of the same z-test on 2000 simulated checks whose
    member values follow the model (b c/σ + z, the scale estimated from m untouched rows a step)."""
    claim = Recorded(1.0, 0.1, 10, 1.0)
    m, steps, alpha, trials = 200, 10, 0.01, 2000
    test = SignalTest(claim, m * steps // 2, steps, m, alpha)
    rng = stream(0, "simulated-scores", test="signal-power", leak=leak).numpy()
    members = m // 2
    b = rng.random((trials, steps, members)) < claim.sample_rate
    noise = rng.normal(size=(trials, steps, members))
    scale = np.sqrt(np.mean(rng.normal(size=(trials, steps, m)) ** 2, axis=2))  # in units of the true scale
    values = (b * leak / claim.noise_multiplier + noise) / scale[:, :, None]
    z = (values.reshape(trials, -1).mean(axis=1) - test.expected) / test.se()
    flagged = int(np.sum(z > stats.norm.ppf(1 - alpha)))
    low, high = proportion_confint(flagged, trials, alpha=1e-3, method="beta")
    assert low <= test.power(leak) <= high, (flagged, test.power(leak))


def test_detect_sizes_check_dpsgd_to_catch_it() -> None:
    """detect = 1.5 from one run: as many more as catch σ/1.5 (2 here); a leak it cannot reach
    within MAX_RUNS is a ValueError naming the way out."""
    report = _dpsgd(USER.my_setup, "sized", **{**SMALL, "runs": 1}, detect=1.5)
    assert report.passed and report.details["runs"] == 2 and report.details["detects"] <= 1.5
    first = ProbeRun(Recorded(1.0, 0.1, 10, 1.0), np.zeros((10, 2002)), np.zeros(1000, bool), 10)
    count = _runs_to_detect(first, 1, 1000, 1e-3 / 3, 1.25)  # the fewest runs that catch σ/1.25
    assert signal_test(first.claim, count, 1000, 10, 1e-3 / 3).detects() == 1.25
    assert signal_test(first.claim, count - 1, 1000, 10, 1e-3 / 3).detects() == 1.5
    noisy = ProbeRun(Recorded(10.0, 0.1, 10, 1.0), first.released, first.membership, 10)  # signal/noise 0.01 a step
    with pytest.raises(ValueError, match=r"cannot catch σ/1.1 within 100 runs of 1000 canaries"):
        _runs_to_detect(noisy, 1, 1000, 1e-3 / 3, 1.1)


# --- the field's DP-SGD bugs, planted in the user's setup ------------------------------------------


def _patched(patch):
    """The user's setup with ``patch(optimizer)`` applied after make_private."""

    def setup(model, dataset):
        engine, module, optimizer, loader = USER.my_setup(model, dataset)
        patch(optimizer)
        return engine, module, optimizer, loader

    return setup


def _noise_factor(factor: float):
    return lambda optimizer: scale_added_noise(optimizer, factor)


def test_half_the_noise_fails_signal_to_noise():
    message = _failing(_patched(_noise_factor(0.5)), "half-noise")
    assert "signal to noise" in message and "less noise" in message


def test_adaclip_sigma_eff_told_to_the_accountant_fails():
    # σ_eff = (σ⁻² − (2σ_b)⁻²)^(−1/2) is told; σ is added. With σ_b = σ_eff / 2, σ = σ_eff / √2.
    message = _failing(_patched(_noise_factor(2**-0.5)), "sigma-eff")
    assert "signal to noise" in message


def test_unclipped_gradients_fail():
    def patch(optimizer):
        clip_and_accumulate = optimizer.clip_and_accumulate

        def unclipped() -> None:
            clip = optimizer.max_grad_norm
            optimizer.max_grad_norm = float("inf")
            try:
                clip_and_accumulate()
            finally:
                optimizer.max_grad_norm = clip  # the noise is still for C

        optimizer.clip_and_accumulate = unclipped

    message = _failing(_patched(patch), "unclipped")
    assert "signal to noise" in message and "973× what the claim" in message


def test_realised_batch_normaliser_fails():
    def patch(optimizer):
        clip_and_accumulate = optimizer.clip_and_accumulate
        seen = {"batch": 1}

        def counting() -> None:
            seen["batch"] = max(1, len(optimizer.grad_samples[0]))
            clip_and_accumulate()

        def scale_grad() -> None:
            for p in optimizer.params:
                p.grad /= seen["batch"]

        optimizer.clip_and_accumulate, optimizer.scale_grad = counting, scale_grad

    message = _failing(_patched(patch), "realised")
    assert "normaliser" in message and "realised batch size" in message


def test_weighted_sampler_with_the_loaders_q_fails():
    """Opacus #813's family: the accountant is told q = 1/len(loader) while a WeightedRandomSampler
    draws the up-weighted examples (here the canaries, as a minority class) ten times as often."""

    def setup(model, dataset):
        from opacus import PrivacyEngine

        weights = 1.0 + 9.0 * (dataset.tensors[1] > 0).double()
        sampler = WeightedRandomSampler(weights, num_samples=len(dataset), replacement=True)
        engine = PrivacyEngine(accountant="rdp")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        module, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=DataLoader(dataset, batch_size=200, sampler=sampler),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            poisson_sampling=False,
        )
        return engine, module, optimizer, loader

    message = _failing(setup, "weighted")
    assert "signal to noise" in message


def test_no_nonfinite_guard_fails():
    def setup(model, dataset):
        from opacus import PrivacyEngine

        engine = PrivacyEngine(accountant="rdp")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        module, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=DataLoader(dataset, batch_size=200),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
        )
        return engine, module, optimizer, loader  # stock Opacus, no guard_nonfinite

    message = _failing(setup, "unguarded")
    assert "1 of 6 cases fail" in message and "NaN/inf per-example gradient reached the released update" in message


def test_setup_that_returns_no_opacus_optimizer_is_a_value_error():
    def setup(model, dataset):
        return None, model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(dataset, batch_size=10)

    with pytest.raises(
        ValueError,
        match=r"setup's optimizer must be an Opacus DPOptimizer \(from PrivacyEngine.make_private\), got SGD",
    ):
        check_dpsgd(setup, **SMALL)
    with pytest.raises(ValueError, match=r"setup must return \(engine, module, optimizer, data_loader\), got str"):
        check_dpsgd(lambda model, dataset: "engine", **SMALL)
    with pytest.raises(ValueError, match="examples must be an integer >= canaries"):
        check_dpsgd(USER.my_setup, canaries=100, examples=50)


# --- the field's accountant bugs --------------------------------------------------------------------

CORNER = [Point(1.0, 1e-5, 10_000, 1e-5)]


def _prv(s, q, t, d):
    accountant = PRVAccountant()
    accountant.history = [(s, q, t)]
    return accountant.get_epsilon(d)


def test_prv_lower_estimate_goes_negative_at_the_tiny_q_corner():
    check_accountant(_prv, grid=CORNER, sweeps=False)  # the shipped PRV: ε ≈ 0.0125 there
    with pytest.raises(CheckFailed, match=r"returned a negative value -0\.00748"):
        check_accountant(lambda s, q, t, d: _prv(s, q, t, d) - 0.02, grid=CORNER, sweeps=False)


def test_an_add_remove_accountant_fails_a_replace_one_claim():
    grid = [Point(1.0, 1.0, 10, 1e-5), Point(1.0, 0.01, 1000, 1e-5)]
    check_accountant(USER.my_epsilon, grid=grid, sweeps=False)
    with pytest.raises(CheckFailed, match=r"σ=1 q=1 T=10 δ=1e-05: ε 19.05 is below PLD's 46.21 .* it under-reports"):
        check_accountant(USER.my_epsilon, grid=grid, sweeps=False, neighbouring="replace_one")


def test_half_the_steps_and_a_wrong_direction_fail():
    with pytest.raises(CheckFailed, match="under-reports"):
        check_accountant(
            lambda s, q, t, d: USER.my_epsilon(s, q, max(1, t // 2), d),
            grid=CORNER[:0] + [Point(1.0, 0.01, 1000, 1e-5)],
            sweeps=False,
        )
    # ε that grows with σ (and uses q, T and δ): the σ sweep, from σ = 5 down, sees ε fall
    with pytest.raises(CheckFailed, match=r"ε falls from .* as noise_multiplier goes from 5 to 2.5"):
        check_accountant(lambda s, q, t, d: (1.0 + s) * q * t * -math.log(d), grid=[Point(1.0, 1.0, 1, 0.5)])


def test_a_calibrator_that_overshoots_fails():
    with pytest.raises(CheckFailed, match=r"calibration for ε=1 .* above the target"):
        check_accountant(
            USER.my_epsilon,
            calibrate_fn=lambda e, q, t, d: USER.my_noise(e, q, t, d) * 0.8,
            grid=[Point(1.0, 1.0, 10, 1e-5)],
            sweeps=False,
        )


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (float("nan"), "epsilon_fn returned nan, not a finite number"),
        (-0.5, "returned a negative value -0.5"),
        ("1.0", "epsilon_fn returned '1.0' (str), not a float"),
        (True, "epsilon_fn returned True (bool), not a float"),
        (torch.tensor(1.0), "(Tensor), not a float"),
    ],
)
def test_bad_answers_are_named(answer, reason):
    with pytest.raises(CheckFailed, match=re.escape(reason)):
        check_accountant(lambda s, q, t, d: answer, grid=CORNER, sweeps=False)


def test_an_accountant_that_raises_is_named_with_its_point():
    def broken(s, q, t, d):
        raise ZeroDivisionError("q too small")

    with pytest.raises(
        CheckFailed, match=r"σ=1 q=1e-05 T=10000 δ=1e-05: epsilon_fn raised ZeroDivisionError: q too small"
    ):
        check_accountant(broken, grid=CORNER, sweeps=False)


def test_misuse_is_a_value_error():
    with pytest.raises(ValueError, match="the grid is empty"):
        check_accountant(USER.my_epsilon, grid=[])
    with pytest.raises(ValueError, match="epsilon_fn must be callable"):
        check_accountant(3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="neighbouring must be one of"):
        check_accountant(USER.my_epsilon, neighbouring="swap")


# --- check_mechanism --------------------------------------------------------------------------------


def test_check_mechanism_passes_the_gaussian_and_fails_a_quarter_of_its_noise():
    sigma = accounting.calibrate(1.0, 1e-5, 1.0, 1)
    phases = [accounting.GaussianPhase(sigma, 1.0, 1)]
    D, D2 = np.zeros(10), np.append(np.zeros(10), 1.0)
    honest = stream(0, "simulated-scores", test="check-mechanism").numpy()
    check_mechanism(
        lambda d: d.sum() + sigma * honest.standard_normal(), (D, D2), epsilon=1.0, delta=1e-5, phases=phases
    )
    leaky = stream(1, "simulated-scores", test="check-mechanism").numpy()
    with pytest.raises(CheckFailed, match="D′ releases larger: ε_LB"):
        check_mechanism(
            lambda d: d.sum() + sigma / 4 * leaky.standard_normal(), (D, D2), epsilon=1.0, delta=1e-5, phases=phases
        )
    with pytest.raises(CheckFailed, match="release_fn returned array"):
        check_mechanism(lambda d: np.ones(2), (D, D2), epsilon=1.0, delta=1e-5)


def test_check_mechanism_states_what_it_can_catch_and_sizes_itself_by_detect():
    """A Gaussian at σ/2 of its claim (true ε 2.15 for a claim of 1): at the default 2,000 runs a
    side it passes, and its report says it catches σ/4 only, so the pass is not read as evidence
    against σ/2; with ``detect=2`` the check sizes itself to a run count whose power catches σ/2,
    and fails it. An honest mechanism at that size passes. A detect no size reaches: ValueError."""
    sigma = accounting.calibrate(1.0, 1e-5, 1.0, 1)
    D, D2 = np.zeros(10), np.append(np.zeros(10), 1.0)
    half = stream(0, "simulated-scores", test="check-mechanism-power").numpy()
    passed = check_mechanism(lambda d: d.sum() + sigma / 2 * half.standard_normal(), (D, D2), epsilon=1.0, delta=1e-5)
    assert passed.details["runs"] == 2000 and passed.details["detects"] == 4.0
    assert all("at 2000 runs a side it catches σ/4 with 90% (95% confidence)" in c.why for c in passed.cases)
    with pytest.raises(CheckFailed, match="ε_LB") as failed:
        check_mechanism(
            lambda d: d.sum() + sigma / 2 * half.standard_normal(), (D, D2), epsilon=1.0, delta=1e-5, detect=2.0
        )
    sized = failed.value.report.details
    assert sized["runs"] > 2000 and sized["detects"] is not None and sized["detects"] <= 2.0
    honest = stream(1, "simulated-scores", test="check-mechanism-power").numpy()
    report = check_mechanism(
        lambda d: d.sum() + sigma * honest.standard_normal(), (D, D2), epsilon=1.0, delta=1e-5, detect=2.0
    )
    assert report.details["runs"] == sized["runs"]
    with pytest.raises(ValueError, match=r"catches σ/1\.1 for this claim"):
        check_mechanism(lambda d: d.sum(), (D, D2), epsilon=1.0, delta=1e-5, detect=1.1)


def test_opacus_rdp_is_the_reference_users_compare_with():
    """The reference in the failure messages is dp_accounting's PLD (what the package accounts with)."""
    accountant = RDPAccountant()
    accountant.history = [(1.0, 1.0, 10)]
    assert accountant.get_epsilon(1e-5) > accounting.pld_epsilon([accounting.GaussianPhase(1.0, 1.0, 10)], 1e-5)


# --- accountants that ignore an input, over-report, or under-report small ε -------------------------


def _pld(s, q, t, d):
    return accounting.pld_epsilon([accounting.GaussianPhase(s, q, t)], d)


def test_an_accountant_that_ignores_q_fails_on_its_flat_sweep_first():
    with pytest.raises(CheckFailed) as failed:
        check_accountant(lambda s, q, t, d: USER.my_epsilon(s, 1.0, t, d), grid=DEFAULT_GRID[:1])
    message = str(failed.value)
    assert re.search(r"^check_accountant: \d+ of \d+ cases fail:\n- sweep over sample_rate", message)
    assert "ε does not change with sample_rate" in message and "is the sampling rate used?" in message
    # the flat sweep ends the check: the grid (minutes for such an accountant) is not asked
    report = failed.value.report
    assert report.details["stopped_at"].startswith("sweep over sample_rate")
    assert all(c.where.startswith("sweep") for c in report.cases) and len(report.cases) == 1


def test_a_call_past_its_deadline_fails_in_one_line_naming_its_point(monkeypatch):
    """An accountant that never answers at large ε (q ≥ 0.5 here): the call is stopped at the
    per-point limit (5 s here) and its case fails in one line naming the point; the check returns."""
    import time

    from dpaudit_mix.testing import accountant as module

    monkeypatch.setattr(module, "POINT_SECONDS", 5.0)

    def hangs(s, q, t, d):
        if q >= 0.5:
            time.sleep(3600)
        return USER.my_epsilon(s, q, t, d)

    started = time.monotonic()
    with pytest.raises(CheckFailed) as failed:
        check_accountant(hangs, grid=[DEFAULT_GRID[0], DEFAULT_GRID[2]], sweeps=False)
    assert time.monotonic() - started < 30
    late = failed.value.report.failures
    assert [c.where for c in late] == [str(DEFAULT_GRID[2])]
    assert "epsilon_fn(1.0, 1.0, 10, 1e-05) did not answer within 5 s (stopped)" in late[0].why
    assert "\n" not in late[0].why


@pytest.mark.full
@pytest.mark.parametrize("base", ["pld", "prv"])
def test_accountants_that_ignore_q_fail_within_a_minute(base):
    """dp_accounting's PLD and Opacus' PRV, each asked with q read as 1: at q = 1 and T = 1000 each
    call takes 5-20 s (ε ≈ 634), and a grid of such points took minutes. The q sweep, first and
    from its cheapest point, fails them in two calls."""
    import time

    import dp_accounting
    from opacus.accountants import PRVAccountant

    def pld(s, q, t, d):
        accountant = dp_accounting.pld.PLDAccountant()
        accountant.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(s), t))
        return accountant.get_epsilon(d)

    def prv(s, q, t, d):
        accountant = PRVAccountant()
        accountant.history = [(s, 1.0, t)]
        return accountant.get_epsilon(d)

    started = time.monotonic()
    with pytest.raises(CheckFailed, match="sweep over sample_rate"):
        check_accountant({"pld": pld, "prv": prv}[base])
    assert time.monotonic() - started < 60


def test_an_accountant_that_counts_a_step_per_epoch_fails_naming_its_steps():
    """ε of T·q steps still rises with q and T, but falls short of PLD's along the q sweep's cheap
    end: the hint names the sampling rate and the step count."""

    def per_epoch(s, q, t, d):
        return USER.my_epsilon(s, q, max(1, math.ceil(t * q)), d)

    with pytest.raises(CheckFailed, match=r"sweep over sample_rate .* below PLD's .* every step counted"):
        check_accountant(per_epoch, grid=DEFAULT_GRID[:1])


def test_an_accountant_that_squares_q_fails_leading_with_the_sampling_rate():
    """Opacus' RDP given q²: ε still rises along every sweep, and a flat stretch of its steps sweep
    (RDP's conversion floor at q = 10⁻⁴) would have blamed the step count. The q sweep's cheap end
    holds ε to PLD, so the message leads with the sampling rate; one failing case a line, and
    ``CheckFailed.cases`` holds them."""

    def squares_q(s, q, t, d):
        accountant = RDPAccountant()
        accountant.history = [(s, q * q, t)]
        return accountant.get_epsilon(d)

    with pytest.raises(CheckFailed) as failed:
        check_accountant(squares_q)
    first, listed = str(failed.value).split("\n")[:2]
    assert first.startswith("check_accountant: ") and first.endswith("cases fail:")
    assert (
        listed.startswith("- sweep over sample_rate") and "is the sampling rate used as given (not squared)" in listed
    )
    assert [c.line() for c in failed.value.cases] == [listed[2:]]


def test_an_accountant_that_ignores_delta_fails_on_the_delta_sweep():
    with pytest.raises(CheckFailed, match=r"ε does not change with delta: .* is δ used\?"):
        check_accountant(lambda s, q, t, d: USER.my_epsilon(s, q, t, 1e-5), grid=DEFAULT_GRID[:1])


def test_a_conservative_accountant_is_accepted_only_when_asked():
    doubled = [Point(1.0, 0.01, 1000, 1e-5)]
    with pytest.raises(CheckFailed, match=r"over-reports .* pass strict=False"):
        check_accountant(lambda s, q, t, d: 20 * _pld(s, q, t, d), grid=doubled, sweeps=False)
    report = check_accountant(lambda s, q, t, d: 20 * _pld(s, q, t, d), grid=doubled, sweeps=False, strict=False)
    assert report.passed and report.details["over_reports"] == [str(doubled[0])]
    # Opacus' RDP, 52× PLD at the tiny-q corner where both ε are below 0.4, is no over-report
    assert check_accountant(USER.my_epsilon, grid=CORNER, sweeps=False).details["over_reports"] == []


@pytest.mark.parametrize(
    "small", [lambda e: 0.0 if e < 0.02 else e, lambda e: e / 2 if e < 0.05 else e], ids=["zero", "halved"]
)
def test_an_accountant_that_under_reports_small_epsilon_fails_at_the_tiny_q_point(small):
    with pytest.raises(CheckFailed, match=r"σ=1 q=1e-05 T=10000 δ=1e-05: ε .* it under-reports"):
        check_accountant(lambda s, q, t, d: small(_pld(s, q, t, d)), grid=CORNER, sweeps=False)


def test_an_accountant_using_torch_answers_after_the_caller_ran_torch_threads(tmp_path):
    """A user's suite that ran a multithreaded torch op before check_accountant: the forked child
    inherits torch's OpenMP pool without its threads, and an honest accountant that uses torch
    hung there until its deadline; the child runs torch on one thread. In a fresh process with
    torch's default threads (this suite's workers run on one)."""
    import os
    import subprocess
    import sys

    script = tmp_path / "omp.py"
    script.write_text(
        "import torch\n"
        "torch.set_num_threads(2); x = torch.randn(1000, 1000); (x @ x).sum()\n"
        "from dpaudit_mix.testing import accountant\n"
        "accountant.POINT_SECONDS = 20.0\n"
        "def uses_torch(s, q, t, d):\n"
        "    y = torch.randn(300, 300); return float((y @ y).abs().sum() > 0)\n"
        "print(accountant._Clock.start().answer(uses_torch, 'epsilon_fn', (1.0, 0.1, 10, 1e-5)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip() == "(1.0, '')", done.stdout + done.stderr
