"""dpaudit_mix.testing: the user's test file of docs/testing.md passes as written, and each of
the field's bugs planted in it fails the matching check with its one-line reason."""

from __future__ import annotations

import re
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from opacus.accountants import PRVAccountant, RDPAccountant
from torch.utils.data import DataLoader, WeightedRandomSampler

from dpaudit_mix import accounting
from dpaudit_mix.randomness import stream, torch_scope
from dpaudit_mix.testing import CheckFailed, Point, check_accountant, check_dpsgd, check_mechanism

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


# --- the field's DP-SGD bugs, planted in the user's setup ------------------------------------------


def _patched(patch):
    """The user's setup with ``patch(optimizer)`` applied after make_private."""

    def setup(model, dataset):
        engine, module, optimizer, loader = USER.my_setup(model, dataset)
        patch(optimizer)
        return engine, module, optimizer, loader

    return setup


def _noise_factor(factor: float):
    def patch(optimizer):
        add_noise = optimizer.add_noise

        def scaled() -> None:
            told = optimizer.noise_multiplier
            optimizer.noise_multiplier = told * factor
            try:
                add_noise()
            finally:
                optimizer.noise_multiplier = told  # what the accountant's hook reads

        optimizer.add_noise = scaled

    return patch


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
    with pytest.raises(CheckFailed, match=r"ε rises from .* as noise_multiplier goes from"):
        check_accountant(lambda s, q, t, d: 1.0 + s, grid=[Point(1.0, 1.0, 1, 0.5)])


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


def test_opacus_rdp_is_the_reference_users_compare_with():
    """The reference in the failure messages is dp_accounting's PLD (what the package accounts with)."""
    accountant = RDPAccountant()
    accountant.history = [(1.0, 1.0, 10)]
    assert accountant.get_epsilon(1e-5) > accounting.pld_epsilon([accounting.GaussianPhase(1.0, 1.0, 10)], 1e-5)
