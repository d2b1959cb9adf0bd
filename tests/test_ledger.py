"""The privacy ledger on a real database: reservations as one serialised transaction on SQLite and
PostgreSQL alike, an append-only chain of signed rows that shows every change made without a
trusted key, imports of the earlier JSON layout, and the identity of the data it keys by."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix import accounting
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, data_sha256, dumps, loads
from dpaudit_mix.release import ledger, signing
from dpaudit_mix.release.ledger_store import location

from .conftest import random_problem

PHASE = accounting.GaussianPhase(5.0, 1.0, 10)
DELTA = 1e-5
ONE, TWO, THREE, FOUR = (accounting.epsilon([PHASE] * n, DELTA, "pld") for n in (1, 2, 3, 4))
#: room for one release of PHASE, not for two; for three, not for four.
BUDGET_FOR_ONE, BUDGET_FOR_THREE = (ONE + TWO) / 2, (THREE + FOUR) / 2


def _reserve(where: str | Path, budget: float | None = None, data: str = "d" * 64) -> str:
    return ledger.reserve(
        where,
        data_sha256=data,
        problem_sha256="f" * 64,
        epsilon=1.0,
        delta=DELTA,
        phase=PHASE,
        user_level=False,
        timestamp="t",
        budget=budget,
    )


def _rows(where: str) -> int:
    return ledger.verify_chain(where)[0]


def test_reserve_commit_withdraw(ledger_at: str) -> None:
    one = _reserve(ledger_at)
    two = _reserve(ledger_at)
    ledger.commit(ledger_at, one, "a" * 64)
    ledger.withdraw(ledger_at, two, "refused: nothing published")
    (entry,) = ledger.read(ledger_at)
    assert entry.id == one and entry.status == "released" and entry.manifest_sha256 == "a" * 64
    assert ledger.spent(ledger.read(ledger_at), "d" * 64, problem_sha256="", delta=DELTA) == pytest.approx(ONE)
    assert ledger.spent(ledger.read(ledger_at), "e" * 64, problem_sha256="", delta=DELTA) == 0.0  # other data
    assert ledger.verify_chain(ledger_at) == (5, None)  # trust-key, two reservations, a commit, a withdrawal
    with pytest.raises(InputError, match="already committed"):
        ledger.commit(ledger_at, one, "b" * 64)
    with pytest.raises(InputError, match="was released: a published release is never withdrawn"):
        ledger.withdraw(ledger_at, one, "second thoughts")


def test_a_reservation_counts_until_withdrawn_and_over_budget_writes_nothing(ledger_at: str) -> None:
    """A crash after reserve (no commit, no withdraw) leaves the reservation counted: over-count."""
    _reserve(ledger_at, BUDGET_FOR_ONE)  # the release that "crashed"
    before = _rows(ledger_at)
    with pytest.raises(ledger.OverBudget):
        _reserve(ledger_at, BUDGET_FOR_ONE)
    assert _rows(ledger_at) == before


def _race(where: str, budget: float, results: multiprocessing.Queue[str]) -> None:
    try:
        _reserve(where, budget)
        results.put("reserved")
    except ledger.OverBudget:
        results.put("refused")


def test_eight_processes_reserving_at_once_share_one_budget(ledger_at: str) -> None:
    """8 processes reserve on one data set at once with room for 3: exactly 3 go out."""
    _reserve(ledger_at, BUDGET_FOR_THREE, data="0" * 64)  # the ledger and its key exist before the race
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    racers = [context.Process(target=_race, args=(ledger_at, BUDGET_FOR_THREE, results)) for _ in range(8)]
    for r in racers:
        r.start()
    for r in racers:
        r.join(timeout=300)
    assert all(r.exitcode == 0 for r in racers)
    assert sorted(results.get(timeout=5) for _ in racers) == ["refused"] * 5 + ["reserved"] * 3
    assert ledger.spent(ledger.read(ledger_at), "d" * 64, problem_sha256="", delta=DELTA) <= BUDGET_FOR_THREE
    assert ledger.verify_chain(ledger_at)[1] is None


def _tamper(where: str, statement: str) -> None:
    """A change made by hand, as a tester with the database would: the triggers dropped first."""
    if where.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(where, autocommit=True) as connection:
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                connection.execute(statement)
            connection.execute("DROP TRIGGER ledger_rows_append_only ON ledger_rows")
            connection.execute(statement)
    else:
        with sqlite3.connect(where) as connection:
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                connection.execute(statement)
            connection.execute("DROP TRIGGER ledger_rows_no_update")
            connection.execute("DROP TRIGGER ledger_rows_no_delete")
            connection.execute(statement)


@pytest.mark.parametrize(
    ("change", "row", "why"),
    [
        (
            "UPDATE ledger_rows SET body = replace(body, '\"budget_epsilon\": 10.0', '\"budget_epsilon\": 100.0') "
            "WHERE seq = 2",
            2,
            "edited after it was written",
        ),
        (
            "UPDATE ledger_rows SET body = replace(body, '\"epsilon\": 1.0', '\"epsilon\": 0.1') WHERE seq = 4",
            4,
            "edited after it was written",
        ),
        ("DELETE FROM ledger_rows WHERE seq = 3", 4, "a row was deleted or moved"),
        ("DELETE FROM ledger_rows WHERE seq = (SELECT max(seq) FROM ledger_rows)", 5, "no longer holds it"),
    ],
)
def test_verify_names_the_first_row_a_hand_changed(ledger_at: str, capsys, change: str, row: int, why: str) -> None:
    """A cap raised, an ε lowered, a row deleted, the newest row deleted: `ledger verify` exits 3
    naming the row; the untouched ledger verifies (exit 0)."""
    first = _reserve(ledger_at, budget=10.0)
    ledger.commit(ledger_at, first, "a" * 64)
    second = _reserve(ledger_at)
    ledger.commit(ledger_at, second, "b" * 64)
    assert main(["ledger", "verify", "--ledger", ledger_at]) == 0
    capsys.readouterr()
    _tamper(ledger_at, change)
    assert main(["ledger", "verify", "--ledger", ledger_at]) == 3
    found = json.loads(capsys.readouterr().out)
    assert found["intact"] is False and found["broken"]["row"] == row and why in found["broken"]["why"]


def test_a_key_the_ledger_does_not_trust_writes_nothing_until_trusted(
    ledger_at: str, tmp_path: Path, monkeypatch
) -> None:
    """Two machines (state folders with their own keys) on one ledger: the second writes only once a
    machine the ledger trusts has run trust-key on its public key; then the cap holds for both."""
    _reserve(ledger_at, BUDGET_FOR_ONE)  # the first machine
    first_key = signing.key_path()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "second-machine"))
    assert signing.key_path() != first_key
    with pytest.raises(InputError, match="does not trust this machine's signing key"):
        _reserve(ledger_at, BUDGET_FOR_ONE)
    pem = tmp_path / "second.pem"
    pem.write_text(signing.public_pem(signing.signing_key().public_key()))
    monkeypatch.setenv("XDG_STATE_HOME", str(first_key.parent.parent))
    assert main(["ledger", "trust-key", str(pem), "--ledger", ledger_at]) == 0
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "second-machine"))
    with pytest.raises(ledger.OverBudget):  # trusted now, and over the data's one cap
        _reserve(ledger_at, BUDGET_FOR_ONE)
    _reserve(ledger_at, BUDGET_FOR_ONE, data="e" * 64)
    assert ledger.verify_chain(ledger_at)[1] is None


def test_a_json_ledger_is_imported_once_with_its_history(tmp_path: Path, capsys) -> None:
    """A v5 JSON ledger: `ledger show` reads its data sets and releases after the import, which
    records the file's sha256; a second import of it is refused; the gate refuses beside it first."""
    json_ledger = tmp_path / "ledger.json"
    caps = {"d" * 64: {"budget_epsilon": 2.0, "delta": DELTA, "since": "t0", "changes": [], "identity": "sensitive"}}
    entry = {
        "id": "e" * 32,
        "status": "released",
        "data_sha256": "d" * 64,
        "epsilon": 1.0,
        "delta": DELTA,
        "noise_multiplier": 5.0,
        "sample_rate": 1.0,
        "steps": 10,
        "user_level": False,
        "timestamp": "t0",
        "manifest_sha256": "a" * 64,
        "kind": "lambda",
    }
    json_ledger.write_text(
        json.dumps({"format": "dpaudit-mix privacy ledger v5", "datasets": caps, "releases": [entry]})
    )
    book = str(tmp_path / "ledger.sqlite")
    assert ledger.unimported_json(book) == json_ledger
    assert main(["ledger", "import", str(json_ledger), "--ledger", book]) == 0
    shown = json.loads(capsys.readouterr().out)["datasets"]["d" * 64]
    assert shown["budget_epsilon"] == 2.0 and shown["releases"] == 1 and shown["spent_epsilon"] == pytest.approx(ONE)
    assert ledger.unimported_json(book) is None
    assert main(["ledger", "import", str(json_ledger), "--ledger", book]) == 2
    with pytest.raises(ledger.OverBudget):  # the imported release keeps counting against the cap
        _reserve(book)  # the imported cap (2.0) holds; its release alone spent more
    assert ledger.verify_chain(book)[1] is None


def test_where_the_ledger_lives() -> None:
    """A path is an SQLite file; libpq's URL works as written and is shown without its password;
    a JSON file is refused by name, pointing at the import."""
    assert location("x/ledger.sqlite").path == Path("x/ledger.sqlite").absolute()
    team = location("postgresql://dp:secret@db.example:5433/ledger")
    assert (
        team.url.startswith("postgresql+psycopg://dp:secret@")
        and team.shown == "postgresql://dp:***@db.example:5433/ledger"
    )
    with pytest.raises(InputError, match=r"ledger import old\.json"):
        location("old.json")
    with pytest.raises(InputError, match="neither a path nor"):
        location("mysql://x/y")


def test_a_damaged_ledger_refuses_in_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "ledger.sqlite"
    broken.write_bytes(b"not a database, not at all" * 100)
    with pytest.raises(InputError, match=r"the ledger .*ledger\.sqlite: file is not a database"):
        _reserve(broken)
    assert broken.read_bytes() == b"not a database, not at all" * 100


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


def test_the_cap_and_delta_belong_to_the_data_not_the_spec(ledger_at: str) -> None:
    """The first release fixes the data's cap and δ: a spec with another cap, or none after a cap
    was set, cannot spend more; a release at another δ is refused; set-budget changes the cap, a
    signed row; a withdrawn first reservation fixes nothing."""
    first = _reserve(ledger_at, budget=BUDGET_FOR_ONE)
    with pytest.raises(ledger.Conflict, match="a spec cannot change it"):
        _reserve(ledger_at, budget=10 * BUDGET_FOR_ONE)
    with pytest.raises(ledger.OverBudget):
        _reserve(ledger_at)  # no cap in the spec: the data's cap still holds
    with pytest.raises(ledger.Conflict, match="accounted at delta 1e-05"):
        ledger.reserve(
            ledger_at,
            data_sha256="d" * 64,
            problem_sha256="f" * 64,
            epsilon=1.0,
            delta=0.5,
            phase=PHASE,
            user_level=False,
            timestamp="t",
            budget=None,
        )
    changed = ledger.set_budget(ledger_at, "d" * 12, 10 * BUDGET_FOR_ONE, "t2")
    assert changed.budget_epsilon == 10 * BUDGET_FOR_ONE and changed.changes[-1]["from"] == BUDGET_FOR_ONE
    _reserve(ledger_at)
    assert ledger.standing(ledger_at, "d" * 64, "f" * 64)[1] == 10 * BUDGET_FOR_ONE
    ledger.withdraw(ledger_at, _reserve(ledger_at, budget=BUDGET_FOR_ONE, data="e" * 64), "refused")
    _reserve(ledger_at, budget=50.0, data="e" * 64)  # the refused first release fixed nothing
    assert ledger.read(ledger_at)[0].id == first


def test_a_thousand_releases_of_one_configuration_compose_at_once() -> None:
    """Phases of one (σ, q) merge (composition commutes): a data set's history of one configuration
    is one PLD composition however long it is, at the ε of the phases one by one."""
    from dpaudit_mix.release.ledger_spend import compacted

    other = accounting.GaussianPhase(2.0, 0.5, 3)
    assert compacted([PHASE] * 1000 + [other]) == [accounting.GaussianPhase(5.0, 1.0, 10_000), other]
    few = [PHASE, other, PHASE, PHASE]
    assert accounting.epsilon(compacted(few), DELTA) == pytest.approx(accounting.epsilon(few, DELTA), rel=1e-6)


def test_the_ledger_command_shows_and_changes_a_cap(capsys, tmp_path: Path) -> None:
    book = str(tmp_path / "ledger.sqlite")
    _reserve(book, budget=BUDGET_FOR_ONE)
    assert main(["ledger", "set-budget", "d" * 8, "--epsilon", "5", "--ledger", book]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ledger"] == book and shown["head"]["row"] == 3
    assert (
        shown["datasets"]["d" * 64]["budget_epsilon"] == 5.0
        and shown["datasets"]["d" * 64]["changes"][-1]["from"] == BUDGET_FOR_ONE
    )
    assert main(["ledger", "set-budget", "d" * 8, "--ledger", book]) == 2  # neither --epsilon nor --no-cap
    assert main(["ledger", "withdraw", "x" * 32, "--ledger", book]) == 2  # no --why
    assert main(["ledger", "show", "--ledger", "/dev/full"]) == 2


def test_a_key_that_signed_is_never_silently_replaced(tmp_path: Path, monkeypatch) -> None:
    """The key this machine made signs a release row; deleted, it is an error naming its
    fingerprint, not a new key whose releases the ledger would take for another machine's."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    _reserve(str(tmp_path / "ledger.sqlite"))
    made = signing.fingerprint(signing.signing_key().public_key())
    signing.key_path().unlink()
    with pytest.raises(InputError, match=f"missing, and this machine's key {made} has signed"):
        _reserve(str(tmp_path / "ledger.sqlite"))
    assert not signing.key_path().exists()


def test_nothing_is_written_onto_a_history_changed_by_hand(tmp_path: Path) -> None:
    """Rows deleted from under this machine: the next reservation is refused naming the row (not
    chained onto what is left, which would then verify), whatever name the ledger is reached by."""
    book = tmp_path / "ledger.sqlite"
    for _ in range(2):
        ledger.commit(str(book), _reserve(str(book), budget=10.0), "a" * 64)
    alias = tmp_path / "alias.sqlite"
    alias.symlink_to(book)
    _tamper(str(book), "DELETE FROM ledger_rows WHERE seq > 3")
    for name in (book, alias):
        with pytest.raises(ledger.BrokenChain, match="breaks at row 5"):
            _reserve(str(name), budget=10.0)
        assert ledger.verify_chain(str(name))[1] is not None
    assert _rows(str(book)) == 3


def test_a_dead_reservation_is_withdrawn_though_another_release_filled_its_folder(tmp_path: Path) -> None:
    """A release killed mid-way leaves its reservation; another release later published into the
    same folder names another id, so the dead one can still be withdrawn (not jammed)."""
    book, out = str(tmp_path / "ledger.sqlite"), tmp_path / "r"
    dead = ledger.reserve(
        book, data_sha256="d" * 64, problem_sha256="f" * 64, epsilon=1.0, delta=DELTA, phase=PHASE,
        user_level=False, timestamp="t", budget=None, out=str(out),
    )  # fmt: skip
    out.mkdir()
    (out / "release.json").write_text(json.dumps({"release_id": "another"}))
    ledger.withdraw(book, dead, "killed mid-release; the folder holds a later release")
    assert ledger.read(book) == []


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("", "--ledger is empty"),
        ("postgresql://u@[::1:5432/db", "cannot be read"),
        ("sqlite:////no/such/folder/x.sqlite", "does not exist"),
        ("x.sqlite?mode=ro", "carries options"),
    ],
)
def test_a_ledger_address_that_names_nothing_is_one_line(capsys, given: str, said: str) -> None:
    assert main(["ledger", "verify", "--ledger", given]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1
