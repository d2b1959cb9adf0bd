"""Proxies (issue #23): CNN proxies are reproducible, smoothed, and early stopping keeps the
epoch of least public validation loss; built problems name their proxies."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import Key, stream
from dpaudit_mix.data import registry
from dpaudit_mix.data.proxies import CLASSES, MAX_EPOCHS, PATIENCE, SMOOTHING, ProxySpec, train_proxy
from dpaudit_mix.data.sources import PublicSource


def _digits(n: int, seed: int, noise: float) -> PublicSource:
    """Images whose class d lights a bar in row 2d (learnable), under Gaussian pixel noise."""
    rng = stream(seed, "synthetic-inputs", test="proxies").numpy()
    labels = rng.integers(CLASSES, size=n)
    images = noise * rng.standard_normal((n, 28, 28))
    images[np.arange(n), 2 * labels + 4, 4:24] += 1.0
    return PublicSource(f"toy-{seed}", images.astype(np.float32), labels)


def _loss(probs: np.ndarray, labels: np.ndarray) -> float:
    return float(-np.mean(np.log(probs[np.arange(len(labels)), labels])))


def test_cnn_proxy_is_reproducible_smoothed_and_named_by_its_key() -> None:
    source, validation = _digits(120, 0, 0.5), _digits(60, 1, 0.5)
    spec = ProxySpec("cnn", 2)
    first = train_proxy(source, spec, validation, Key(0))
    again = train_proxy(source, spec, validation, Key(0))
    other = train_proxy(source, spec, validation, Key(1))
    probs = first.probabilities(validation.images)
    assert first.epochs == 2
    assert np.array_equal(probs, again.probabilities(validation.images))
    assert not np.allclose(probs, other.probabilities(validation.images))
    assert np.allclose(probs.sum(axis=1), 1.0) and probs.min() >= SMOOTHING / CLASSES - 1e-12


def test_early_stopping_keeps_the_epoch_of_least_validation_loss() -> None:
    """The early-stopped proxy is the fixed-budget proxy of its epoch (same key, same trajectory),
    and no epoch it saw had a lower validation loss."""
    source, validation = _digits(150, 2, 1.2), _digits(80, 3, 1.2)
    stopped = train_proxy(source, ProxySpec("cnn"), validation, Key(4))
    assert stopped.epochs is not None and 1 <= stopped.epochs <= MAX_EPOCHS
    best = _loss(stopped.probabilities(validation.images), validation.labels)
    fixed = {
        e: train_proxy(source, ProxySpec("cnn", e), validation, Key(4))
        for e in range(1, 1 + min(MAX_EPOCHS, stopped.epochs + PATIENCE))
    }
    assert np.array_equal(
        fixed[stopped.epochs].probabilities(validation.images), stopped.probabilities(validation.images)
    )
    assert all(_loss(p.probabilities(validation.images), validation.labels) >= best - 1e-12 for p in fixed.values())


@pytest.mark.parametrize(
    "kind, epochs, message",
    [
        ("vit", None, "proxy must be one of"),
        ("cnn", 0, "proxy_epochs must be an integer >= 1"),
        ("logistic", 3, "cnn proxies only"),
    ],
)
def test_proxy_spec_refuses_bad_values(kind: str, epochs: int | None, message: str) -> None:
    with pytest.raises(InputError, match=message):
        ProxySpec(kind, epochs)


def test_built_problem_names_its_proxies_and_their_accuracy() -> None:
    problem = registry.build("mnist-shift", "multiclass", proxy=ProxySpec("cnn", 1))
    accuracy = [float(a) for a in problem.meta["proxy_validation_accuracy"].split(",")]
    assert problem.meta["proxy"] == "cnn, 1 epochs" and problem.meta["proxy_epochs"] == ",".join(["1"] * problem.k)
    assert len(accuracy) == problem.k and all(0 <= a <= 1 for a in accuracy)
    assert max(accuracy) > 0.15  # above chance (0.1; its std on 500 validation images is 0.013) after one epoch


def test_recovery_and_audits_mix_the_network_proxies_they_name() -> None:
    from dpaudit_mix.audit.spec import AuditSpec, resolve_problem
    from dpaudit_mix.optimum import mixmin
    from dpaudit_mix.recovery.grid import run_recovery
    from dpaudit_mix.recovery.spec import RecoverySpec

    cnn = ProxySpec("cnn", 1)
    built = registry.build("mnist-shift", "digit-3", proxy=cnn)
    keys = {"problem": "mnist-shift", "proxy": "cnn", "proxy_epochs": 1}
    recovery = RecoverySpec(
        **keys, tasks=("digit-3",), epsilons=(1.0,), rhos=(0.2,), seeds=2, user_level_tasks=(), k_values=()
    )
    result = run_recovery(recovery, progress=False)
    assert np.allclose(result.lambda_star["digit-3"], mixmin(built.logp).weights)
    audited = resolve_problem(AuditSpec(**keys, task="digit-3"))
    assert np.array_equal(audited.logp, built.logp) and audited.meta["proxy"] == "cnn, 1 epochs"
