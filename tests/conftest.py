"""Shared fixtures: small random problems with a known shape."""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest

from dpaudit_mix.problem import Problem

# Built embedded problems are cached on disk: tests use a cache of their own, never the user's.
# Releases record their budget in the machine's ledger: tests keep one of their own, never the user's.
# Both are removed when the run ends.
_FOLDERS = {
    "DPAUDIT_MIX_CACHE": tempfile.mkdtemp(prefix="dpaudit-mix-test-cache-"),
    "XDG_STATE_HOME": tempfile.mkdtemp(prefix="dpaudit-mix-test-state-"),
}
os.environ.update(_FOLDERS)
os.environ.pop("DPAUDIT_MIX_LEDGER", None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``long`` run first: with one worker per core, a test of minutes started last
    would leave the other core idle while it finishes (longest first balances the workers)."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for folder in _FOLDERS.values():
        shutil.rmtree(folder, ignore_errors=True)


#: the smallest pipeline run that still trains and evaluates (PipelineSpec keys).
TINY_PIPELINE = dict(
    epsilons=(2.0,),
    seeds=1,
    sensitive_fraction=0.25,
    public_fraction=0.25,
    pretrain_examples=300,
    pretrain_epochs=1,
    finetune_epochs=1,
)


def random_problem(n: int, k: int, seed: int, users: bool = False) -> Problem:
    """Log-likelihoods of binary predictions from k proxies of varied sharpness."""
    rng = np.random.default_rng(seed)
    probs = rng.beta(2.0, 1.0, size=(n, k)) ** rng.uniform(0.3, 3.0, size=k)
    user_ids = (np.arange(n) // 3).astype(np.int64) if users else None
    return Problem(np.log(np.clip(probs, 1e-9, 1.0)), tuple(f"s{i}" for i in range(k)), users=user_ids)


@pytest.fixture
def small_problem() -> Problem:
    return random_problem(300, 5, seed=11)
