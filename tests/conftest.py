"""Shared fixtures: small random problems with a known shape."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# With a pytest-xdist worker on every core, each worker computes on one thread: torch's (and
# OpenBLAS') OpenMP pools of one thread per core, in every worker, oversubscribed the cores and
# spun (the run-once and model-release tests took 1.16-1.31× the CPU). Read before either loads.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) >= len(os.sched_getaffinity(0)):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # after the thread setting
import pytest

from dpaudit_mix.problem import Problem

# Built embedded problems and calibrated σs are cached on disk: tests use a cache of their own,
# never the user's. It is one cache for the whole run: pytest-xdist's workers inherit it from the
# process that starts them (a world built or a σ calibrated on one core is read on the other;
# entries are written atomically and checked on reading, as any two processes sharing a cache).
# Releases record their budget in the machine's ledger: each process keeps one of its own, never
# the user's, so that tests on two cores never spend each other's budget. The process that made
# a folder removes it when the run ends.
_SHARED = "DPAUDIT_MIX_TEST_CACHE"  # the run's cache, set by the process that made it
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(_SHARED):
    os.environ["DPAUDIT_MIX_CACHE"] = os.environ[_SHARED]
    _FOLDERS = {}
else:
    _FOLDERS = {_SHARED: tempfile.mkdtemp(prefix="dpaudit-mix-test-cache-")}
    os.environ["DPAUDIT_MIX_CACHE"] = _FOLDERS[_SHARED]
_FOLDERS["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="dpaudit-mix-test-state-")
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


def scale_added_noise(optimizer, factor: float) -> None:
    """A bug inside an Opacus optimizer: it reports its σ (to its accountant's hook and to any
    canaries) but adds ``factor`` times the noise."""
    add_noise = optimizer.add_noise

    def scaled() -> None:
        told = optimizer.noise_multiplier
        optimizer.noise_multiplier = told * factor
        try:
            add_noise()
        finally:
            optimizer.noise_multiplier = told  # what the accountant's hook reads

    optimizer.add_noise = scaled


@pytest.fixture(autouse=True)
def _own_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test releases against a ledger of its own (an SQLite file in its tmp folder), never
    another test's budget: ``DPAUDIT_MIX_LEDGER`` is what a machine or a team points it with."""
    path = tmp_path / "ledger.sqlite"
    monkeypatch.setenv("DPAUDIT_MIX_LEDGER", str(path))
    return path


@pytest.fixture(scope="session")
def postgres_base() -> Iterator[str]:
    """One PostgreSQL server for this test process (:mod:`.postgres`)."""
    from .postgres import server

    with server() as base:
        yield base


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_at(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh ledger on each backend: an SQLite file, or a new database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    from .postgres import fresh_database

    return fresh_database(request.getfixturevalue("postgres_base"))
