"""The privacy ledger as a critical section: reservations, concurrency, damage, identity of the data."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix import accounting
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.problem import Problem, data_sha256, dumps, loads
from dpaudit_mix.release import ledger

from .conftest import random_problem

PHASE = accounting.GaussianPhase(5.0, 1.0, 10)
DELTA = 1e-5
#: room for one release of PHASE, not for two.
BUDGET_FOR_ONE = (accounting.epsilon([PHASE], DELTA, "pld") + accounting.epsilon([PHASE, PHASE], DELTA, "pld")) / 2


def _reserve(path: Path, budget: float | None = None, data: str = "d" * 64) -> str:
    return ledger.reserve(
        path,
        data_sha256=data,
        problem_sha256="f" * 64,
        epsilon=1.0,
        delta=DELTA,
        phase=PHASE,
        user_level=False,
        timestamp="t",
        budget=budget,
    )


def test_reserve_commit_withdraw(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    one = _reserve(path)
    two = _reserve(path)
    ledger.commit(path, one, "a" * 64)
    ledger.withdraw(path, two)
    (entry,) = ledger.read(path)
    assert entry.id == one and entry.status == "released" and entry.manifest_sha256 == "a" * 64
    single = accounting.epsilon([PHASE], DELTA, "pld")
    assert ledger.spent(ledger.read(path), "d" * 64, problem_sha256="", delta=DELTA) == pytest.approx(single)
    assert ledger.spent(ledger.read(path), "e" * 64, problem_sha256="", delta=DELTA) == 0.0  # other data, other budget


def test_a_reservation_counts_until_withdrawn_and_over_budget_writes_nothing(tmp_path: Path) -> None:
    """A crash after reserve (no commit, no withdraw) leaves the reservation counted: over-count."""
    path = tmp_path / "ledger.json"
    budget = BUDGET_FOR_ONE
    _reserve(path, budget)  # the release that "crashed"
    before = path.read_bytes()
    with pytest.raises(ledger.OverBudget):
        _reserve(path, budget)
    assert path.read_bytes() == before


def _append_many(path: str, count: int) -> None:
    for _ in range(count):
        _reserve(Path(path))


def test_concurrent_reservations_lose_nothing(tmp_path: Path) -> None:
    """8 processes × 25 read-modify-writes on one ledger: all 200 entries are kept (137 were before)."""
    path = tmp_path / "ledger.json"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_append_many, args=(str(path), 25)) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert all(w.exitcode == 0 for w in workers)
    assert len({e.id for e in ledger.read(path)}) == 200


def _budget_race(path: str, budget: float, results: multiprocessing.Queue[str]) -> None:
    try:
        _reserve(Path(path), budget)
        results.put("reserved")
    except ledger.OverBudget:
        results.put("refused")


def test_two_reservations_started_together_cannot_share_one_budget(tmp_path: Path) -> None:
    budget = BUDGET_FOR_ONE
    context = multiprocessing.get_context("fork")
    for trial in range(5):
        path = tmp_path / f"ledger-{trial}.json"
        results = context.Queue()
        racers = [context.Process(target=_budget_race, args=(str(path), budget, results)) for _ in range(2)]
        for r in racers:
            r.start()
        for r in racers:
            r.join()
        assert sorted(results.get() for _ in racers) == ["refused", "reserved"]
        assert ledger.spent(ledger.read(path), "d" * 64, problem_sha256="", delta=DELTA) <= budget


@pytest.mark.parametrize(
    "content, where",
    [
        ("", "not JSON"),
        ('{"releases": [', "not JSON"),
        ("[]", "no 'releases' list"),
        ('{"releases": [1]}', "entry 0 is not an object"),
        ('{"releases": [{"epsilon": 1}]}', "entry 0: 'steps'"),
        (
            '{"releases": [{"steps": 10, "user_level": false, "epsilon": 1, "delta": 1e-5, "noise_multiplier": 1, '
            '"sample_rate": 1, "timestamp": "t"}]}',
            "names no data",
        ),
        (
            '{"releases": [{"steps": 10, "user_level": false, "epsilon": 1, "delta": 1e-5, "noise_multiplier": -1, '
            '"sample_rate": 1, "timestamp": "t", "data_sha256": "d"}]}',
            "noise multiplier",
        ),
        ('\ufeff{"releases": []}', "not JSON"),
    ],
)
def test_a_damaged_ledger_refuses_and_names_where(tmp_path: Path, content: str, where: str) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=where) as caught:
        _reserve(path)
    assert str(path) in str(caught.value)
    assert path.read_text(encoding="utf-8") == content  # refused, never rewritten


def test_a_deleted_emptied_or_edited_ledger_does_not_read_as_nothing_spent(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    _reserve(path)
    written = path.read_bytes()
    path.unlink()
    with pytest.raises(InputError, match="missing but its lock file"):
        _reserve(path)
    for tampered in ('{"releases": []}', written.decode().replace('"epsilon": 1.0', '"epsilon": 0.5')):
        path.write_text(tampered)
        with pytest.raises(InputError, match="changed outside dpaudit-mix"):
            _reserve(path)
    path.write_bytes(written)  # restored: accepted again
    _reserve(path)
    assert len(ledger.read(path)) == 2


def test_a_symlinked_ledger_is_written_through(tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "ledger.json"
    shared.parent.mkdir()
    link = tmp_path / "mine.json"
    link.symlink_to(shared)
    _reserve(link)
    assert link.is_symlink() and len(ledger.read(shared)) == 1
    _reserve(shared)
    assert len(ledger.read(link)) == 2


def test_the_budget_belongs_to_the_data_not_the_file() -> None:
    """Other source names, task or metadata, or another integer dtype of users: the same data."""
    base = random_problem(40, 3, seed=1)
    users = np.arange(40) // 2
    first = Problem(base.logp, base.sources, users=users.astype(np.int64), task="a")
    second = Problem(
        base.logp.copy(), ("x", "y", "z"), users=users.astype(np.int32), task="b", meta={"note": "unrelated"}
    )
    assert data_sha256(first) == data_sha256(second) == data_sha256(loads(dumps(first), Path("p.npz")))
    assert data_sha256(first) != data_sha256(Problem(base.logp, base.sources, task="a"))  # users are part of it
    assert data_sha256(first) != data_sha256(Problem(base.logp[1:], base.sources, users=users[1:], task="a"))


def test_the_default_ledger_is_the_machines(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DPAUDIT_MIX_LEDGER", raising=False)
    assert ledger.default_path() == tmp_path / "state" / "dpaudit-mix" / "ledger.json"
    monkeypatch.setenv("DPAUDIT_MIX_LEDGER", str(tmp_path / "team.json"))
    assert ledger.default_path() == tmp_path / "team.json"


def test_v1_entries_keep_counting(tmp_path: Path) -> None:
    """A ledger written before data digests: its entries count against the same problem file."""
    path = tmp_path / "ledger.json"
    path.write_text(
        json.dumps(
            {
                "releases": [
                    {
                        "problem_sha256": "f" * 64,
                        "epsilon": 1.0,
                        "delta": DELTA,
                        "noise_multiplier": 5.0,
                        "sample_rate": 1.0,
                        "steps": 10,
                        "user_level": False,
                        "timestamp": "t",
                        "manifest": "/x/release.json",
                    }
                ]
            }
        )
    )
    (entry,) = ledger.read(path)
    assert entry.status == "released" and ledger.spent([entry], "d" * 64, problem_sha256="f" * 64, delta=DELTA) > 0


def test_the_cap_and_delta_belong_to_the_data_not_the_spec(tmp_path: Path) -> None:
    """The first release fixes the data's cap and δ: a spec with another cap, or none after a cap
    was set, cannot spend more; a release at another δ is refused; set-budget changes the cap,
    logged; a withdrawn first reservation fixes nothing."""
    path = tmp_path / "ledger.json"
    first = _reserve(path, budget=BUDGET_FOR_ONE)
    with pytest.raises(ledger.Conflict, match="a spec cannot change it"):
        _reserve(path, budget=10 * BUDGET_FOR_ONE)
    with pytest.raises(ledger.OverBudget):
        _reserve(path)  # no cap in the spec: the data's cap still holds
    with pytest.raises(ledger.Conflict, match="accounted at delta 1e-05"):
        ledger.reserve(
            path,
            data_sha256="d" * 64,
            problem_sha256="f" * 64,
            epsilon=1.0,
            delta=0.5,
            phase=PHASE,
            user_level=False,
            timestamp="t",
            budget=None,
        )
    changed = ledger.set_budget(path, "d" * 12, 10 * BUDGET_FOR_ONE, "t2")
    assert changed.budget_epsilon == 10 * BUDGET_FOR_ONE and changed.changes[-1]["from"] == BUDGET_FOR_ONE
    _reserve(path)
    assert ledger.standing(path, "d" * 64, "f" * 64)[1] == 10 * BUDGET_FOR_ONE
    fresh = tmp_path / "fresh.json"
    ledger.withdraw(fresh, _reserve(fresh, budget=BUDGET_FOR_ONE, data="e" * 64))
    _reserve(fresh, budget=50.0, data="e" * 64)  # the refused first release fixed nothing
    assert ledger.read(path)[0].id == first


def test_row_order_dtype_and_column_order_are_the_same_data() -> None:
    base = random_problem(60, 4, seed=5)
    rows = np.random.default_rng(0).permutation(60)
    columns = [2, 0, 3, 1]
    same = [
        Problem(base.logp[rows], base.sources),
        Problem(base.logp[:, columns], tuple(base.sources[c] for c in columns)),
        Problem(np.nextafter(base.logp, 0.0), base.sources),
        Problem(base.logp.astype(np.float32), base.sources),
    ]
    assert {data_sha256(p) for p in same} == {data_sha256(base)}
    users = np.arange(60) // 3
    with_users = Problem(base.logp, base.sources, users=users)
    relabelled = Problem(base.logp[rows], base.sources, users=(users * 7 + 11)[rows])
    assert data_sha256(with_users) == data_sha256(relabelled) != data_sha256(base)


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_ledger_path_that_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path: Path, kind: str) -> None:
    import os

    path = {"fifo": tmp_path / "fifo", "device": Path("/dev/full"), "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(InputError, match="is not a regular file"):
        _reserve(path)
    assert not Path("/dev/full.lock").exists()


def test_the_ledger_command_shows_and_changes_a_cap(capsys, tmp_path: Path) -> None:
    from dpaudit_mix.cli import main

    path = tmp_path / "ledger.json"
    _reserve(path, budget=BUDGET_FOR_ONE)
    assert main(["ledger", "set-budget", "d" * 8, "--epsilon", "5", "--ledger", str(path)]) == 0
    shown = json.loads(capsys.readouterr().out)["datasets"]["d" * 64]
    assert shown["budget_epsilon"] == 5.0 and shown["changes"][-1]["from"] == BUDGET_FOR_ONE
    assert main(["ledger", "set-budget", "d" * 8, "--ledger", str(path)]) == 2  # neither --epsilon nor --no-cap
    assert main(["ledger", "show", "--ledger", "/dev/full"]) == 2
