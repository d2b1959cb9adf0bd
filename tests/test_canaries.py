"""Dirac canaries inside a user's own Opacus training: attached after make_private, the user's
loop unchanged, one run audited; an optimizer adding a quarter of its noise is caught."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset

from dpaudit_mix import accounting
from dpaudit_mix.audit.one_run import gradient_canaries
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import stream, torch_scope
from dpaudit_mix.canaries import attach

from .conftest import scale_added_noise

DELTA, BATCH, EXAMPLES, EPOCHS = 1e-5, 64, 512, 3
Q = BATCH / EXAMPLES
STEPS = EPOCHS * round(1 / Q)


def _training(
    test: str, examples: int = EXAMPLES, engine: str = "prv"
) -> tuple[torch.nn.Module, torch.optim.Optimizer, DataLoader, float, object]:
    """A user's own small model, data and Opacus engine (σ for ε = 2 by the PLD accountant; the
    engine's own accountant, returned last, Opacus' default, PRV, unless ``engine`` says)."""
    rng = stream(0, "simulated-scores", test=test).numpy()
    x = torch.from_numpy(rng.normal(size=(examples, 5)).astype(np.float32))
    y = torch.from_numpy((rng.random(examples) < 0.5).astype(np.int64))
    with torch_scope(stream(0, "model-init", test=test)):
        model = torch.nn.Linear(5, 2)
    sigma = accounting.calibrate(2.0, DELTA, Q, STEPS)
    generator = stream(0, "finetune-noise", test=test).torch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        private = PrivacyEngine(accountant=engine)
        model, optimizer, loader = private.make_private(
            module=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            data_loader=DataLoader(TensorDataset(x, y), batch_size=BATCH),
            noise_multiplier=sigma,
            max_grad_norm=1.0,
            noise_generator=generator,
        )
    return model, optimizer, loader, sigma, private.accountant


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader) -> None:
    """The user's loop, as they wrote it."""
    for _ in range(EPOCHS):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


@pytest.mark.parametrize(("test", "noise_factor", "violation"), [("honest", 1.0, False), ("quarter-noise", 0.25, True)])
def test_one_opacus_run_with_canaries_is_audited(test: str, noise_factor: float, violation: bool) -> None:
    model, optimizer, loader, sigma, accountant = _training(test)
    membership = stream(0, "canary-membership", test=test).numpy()
    canaries = attach(optimizer, 4000, accountant=accountant, sample_rate=Q, source=membership)
    scale_added_noise(optimizer, noise_factor)  # a bug that reports the claimed σ, or none
    _train(model, optimizer, loader)
    phases = [accounting.GaussianPhase(sigma, Q, len(canaries.released))]
    assert canaries.phases() == phases  # what ran, as the optimizer reported it
    result = canaries.audit(epsilon=accounting.epsilon(phases, DELTA), delta=DELTA)
    assert result.violation is violation and result.canaries == 4000
    assert all(p.shape[0] != 4000 for p in model.parameters())  # the model holds no canary coordinate
    canaries.detach()
    assert all(p is not canaries.weight for p in optimizer.params)
    _train(model, optimizer, loader)  # the optimizer works as before once the canaries are gone


def test_canaries_need_an_opacus_optimizer_and_enough_of_them() -> None:
    model = torch.nn.Linear(2, 2)
    with pytest.raises(InputError, match="Opacus DPOptimizer"):
        attach(torch.optim.SGD(model.parameters(), lr=0.1), 100, sample_rate=0.1)
    _, optimizer, _, _, _ = _training("bad")
    with pytest.raises(InputError, match="m must be an integer >= 20"):
        attach(optimizer, 5, sample_rate=Q)
    with pytest.raises(InputError, match="sample_rate"):
        attach(optimizer, 100, sample_rate=1.5)
    with pytest.raises(InputError, match="canaries over 1,000 steps"):  # refused before anything is allocated
        attach(optimizer, 10**13, sample_rate=Q)


def test_attach_takes_q_from_public_seams_and_refuses_a_wrong_one() -> None:
    """N = 1,437 with batches of 64: Opacus samples at 1/len(loader) = 1/23, not 64/1437. Before
    a step q is the given one (the loader's ``sample_rate``); once the accountant has counted a
    step, q is read from its public history and a given q must agree with it."""
    model, optimizer, loader, sigma, accountant = _training("q", examples=1437)
    assert loader.sample_rate == pytest.approx(1 / 23)
    with pytest.raises(InputError, match="no q to sample the canaries at: pass sample_rate="):
        attach(optimizer, 100, accountant=accountant)  # nothing counted yet
    canaries = attach(
        optimizer, 100, sample_rate=loader.sample_rate, source=stream(0, "canary-membership", test="q").numpy()
    )
    assert canaries.sample_rate == pytest.approx(1 / 23)
    canaries.detach()
    x, y = next(iter(loader))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
    with pytest.raises(InputError, match=r"sample_rate=0\.0445.* is not the q this optimizer's accountant counts at"):
        attach(optimizer, 100, accountant=accountant, sample_rate=64 / 1437)
    with pytest.raises(InputError, match="accountant must be an Opacus accountant"):
        attach(optimizer, 100, accountant=object(), sample_rate=loader.sample_rate)
    canaries = attach(optimizer, 100, accountant=accountant, source=stream(0, "canary-membership", test="q").numpy())
    assert canaries.sample_rate == loader.sample_rate
    # the phases as run and counted: a σ changed half-way is a second phase, and ε is the accountant's
    for step, (x, y) in enumerate(loader):
        if step == 10:
            optimizer.noise_multiplier = 2 * sigma
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    phases = canaries.phases()
    assert [(p.noise_multiplier, p.steps) for p in phases] == [(sigma, 10), (2 * sigma, len(canaries.released) - 10)]
    assert {p.sample_rate for p in phases} == {loader.sample_rate}
    canaries.detach()


def test_without_a_counted_step_q_must_be_given() -> None:
    _, optimizer, _, _, _ = _training("no-hook")
    with pytest.raises(InputError, match="no q to sample the canaries at: pass sample_rate="):
        attach(optimizer, 100)
    assert (
        attach(optimizer, 100, sample_rate=Q, source=stream(0, "canary-membership", test="no-hook").numpy()).sample_rate
        == Q
    )


def test_the_audit_names_its_accountant_and_the_users_engine_beside_it(monkeypatch, capsys) -> None:
    """The claim's ε is the PLD accountant's; the user's Opacus engine (RDP here) says its own
    get_epsilon beside it, larger, with the one line on why. The call's progress bar (shown past
    PROGRESS_AFTER seconds; here at once) names its steps."""
    monkeypatch.setattr(gradient_canaries, "PROGRESS_AFTER", 0.0)
    model, optimizer, loader, _, accountant = _training("accounted", engine="rdp")
    canaries = attach(
        optimizer,
        1000,
        accountant=accountant,
        sample_rate=Q,
        source=stream(0, "canary-membership", test="accounted").numpy(),
    )
    _train(model, optimizer, loader)
    phases = canaries.phases()
    result = canaries.audit(epsilon=accounting.epsilon(phases, DELTA), delta=DELTA, phases=phases)
    said = result.accounted
    assert said is not None and said.accountant == "pld" and said.epsilon == accounting.epsilon(phases, DELTA)
    assert said.engine == "rdp" and said.engine_epsilon == pytest.approx(accounting.epsilon(phases, DELTA, "rdp"))
    assert said.engine_epsilon > said.epsilon  # RDP's conversion to (ε, δ) is the looser bound
    line = result.to_dict()["accounted"]["line"]
    assert "accounted by pld (dp_accounting's PLD)" in line and "engine's rdp accountant" in line
    assert "RDP converts Rényi DP to (ε, δ) by an upper bound" in line
    assert "one-run audit" in capsys.readouterr().err
    ran = canaries.audit(epsilon=accounting.epsilon(phases, DELTA), delta=DELTA)  # no phases: what ran
    assert ran.accounted == said and ran.epsilon_lower_bound == result.epsilon_lower_bound


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("a quarter of the steps", "T 6"),
        ("sigma x 1.3", "sigma 2.1"),
        ("another q", "q 0.0625"),
        ("a second phase", "; sigma"),
    ],
)
def test_a_claim_that_is_not_what_ran_is_refused(change: str, named: str) -> None:
    """A real Opacus training of T = 24 steps at σ for ε = 2: phases for T/4, σ × 1.3, another q
    or an extra phase would claim less than the training spent, and an audit of them passes. Each
    is refused, naming what was given and what ran; so is ``phases=[]``."""
    model, optimizer, loader, sigma, accountant = _training("claims")
    canaries = attach(
        optimizer,
        100,
        accountant=accountant,
        sample_rate=Q,
        source=stream(0, "canary-membership", test="claims").numpy(),
    )
    _train(model, optimizer, loader)
    ran = canaries.phases()
    assert ran == [accounting.GaussianPhase(sigma, Q, STEPS)]
    given = {
        "a quarter of the steps": [accounting.GaussianPhase(sigma, Q, STEPS // 4)],
        "sigma x 1.3": [accounting.GaussianPhase(sigma * 1.3, Q, STEPS)],
        "another q": [accounting.GaussianPhase(sigma, Q / 2, STEPS)],
        "a second phase": [*ran, accounting.GaussianPhase(sigma, 1.0, 1)],
    }[change]
    with pytest.raises(InputError, match="are not what the canaries saw") as refused:
        canaries.audit(epsilon=accounting.epsilon(given, DELTA), delta=DELTA, phases=given)
    said = str(refused.value)
    assert named in said and f"sigma {sigma:.6g}, q {Q:.6g}, T {STEPS})" in said
    with pytest.raises(InputError, match=r"phases=\[\] states no mechanism"):
        canaries.audit(epsilon=2.0, delta=DELTA, phases=[])
    cut = [accounting.GaussianPhase(sigma, Q, 10), accounting.GaussianPhase(sigma, Q, STEPS - 10)]
    assert canaries.ran(cut) == ran  # the same schedule, cut in two


def test_canaries_attached_after_training_began_are_refused() -> None:
    """An epoch before attach: the engine's accountant counted more steps than the canaries saw,
    so an audit of what they saw would test a claim smaller than the training spent."""
    model, optimizer, loader, _, accountant = _training("late")
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    canaries = attach(
        optimizer, 100, accountant=accountant, sample_rate=Q, source=stream(0, "canary-membership", test="late").numpy()
    )
    _train(model, optimizer, loader)
    with pytest.raises(InputError, match=r"accountant counted \d+ steps and the canaries saw \d+"):
        canaries.audit(epsilon=accounting.epsilon(canaries.phases(), DELTA), delta=DELTA)
