"""Fresh noise, inputs read once, nothing destroyed, and faults that end in one line (issue classes)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix import cli
from dpaudit_mix.audit.many_run import engine
from dpaudit_mix.base import atomic
from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, save
from dpaudit_mix.release import check, gate, lambda_kind
from dpaudit_mix.release.manifest import manifest_digest

from .conftest import random_problem
from .test_release import write_spec
from .test_verify import TINY


def _problem(folder: Path) -> Path:
    prob = random_problem(60, 4, seed=7)
    path = folder / "p.npz"
    save(Problem(prob.logp, prob.sources, heldout_logp=random_problem(10, 4, seed=8).logp, task="t"), path)
    return path


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    return _problem(tmp_path)


def _mix(capsys, problem_file: Path, *extra: str) -> tuple[int, dict, str]:
    code = main(["mix", "--problem", str(problem_file), "--epsilon", "1", "--delta", "1e-5", "--steps", "10", *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else {}, err


# --- fresh noise by default -------------------------------------------------------------------


def test_mix_draws_fresh_noise_unless_seeded(capsys, problem_file: Path) -> None:
    a, b = _mix(capsys, problem_file)[1], _mix(capsys, problem_file)[1]
    assert a["noise"] == b["noise"] == "csprng" and a["weights"] != b["weights"]
    code, c, err = _mix(capsys, problem_file, "--seed", "3")
    d = _mix(capsys, problem_file, "--seed", "3")[1]
    assert code == 0 and c["noise"] == "seeded" and c["seed"] == 3 and c["weights"] == d["weights"]
    assert err.count("\n") == 1 and "not for release" in err
    code, _, err = _mix(capsys, problem_file, "--seed", "3", "--secure")
    assert code == 2 and "exclude each other" in err


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One honest release for every forgery below (a release takes seconds)."""
    folder = tmp_path_factory.mktemp("released")
    path = _problem(folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gate, "VERIFY_LEVEL", TINY)
        patch.setenv("DPAUDIT_MIX_LEDGER", str(folder / "ledger.sqlite"))
        assert main(["release", str(write_spec(folder, path)), "--out", str(folder / "r")]) == 0
    return folder / "r" / "release.json"


# --- never destroy what you did not make ------------------------------------------------------


def test_mix_never_writes_over_its_input_or_a_special_file(capsys, tmp_path: Path, problem_file: Path) -> None:
    before = problem_file.read_bytes()
    assert _mix(capsys, problem_file, "--out", str(problem_file))[0] == 2
    assert problem_file.read_bytes() == before
    link = tmp_path / "alias.npz"
    link.symlink_to(problem_file)
    code, _, err = _mix(capsys, problem_file, "--out", str(link))
    assert code == 2 and "is the input" in err and problem_file.read_bytes() == before
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, err = _mix(capsys, problem_file, "--out", str(fifo))
    assert code == 2 and "special file" in err and fifo.is_fifo()
    spec = tmp_path / "spec.toml"
    spec.write_text(f"problem = {json.dumps(str(problem_file))}\n")
    assert main(["audit", str(spec), "--out", "/dev/null"]) == 2
    assert "special file" in capsys.readouterr().err and Path("/dev/null").is_char_device()


def test_outputs_with_looping_or_overlong_names_are_one_line(capsys, tmp_path: Path, problem_file: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for out in (loop / "x.json", tmp_path / ("n" * 300) / "x.json", loop):
        code, _, err = _mix(capsys, problem_file, "--out", str(out))
        assert code == 2 and err.count("\n") == 1, err


def test_a_published_release_is_never_overwritten(capsys, released: Path) -> None:
    out = released.parent
    published = released.read_bytes()
    spec = out.parent / "spec.toml"
    for argv in (["release", str(spec)], ["release", str(out.parent / "typo.toml")]):
        assert main([*argv, "--out", str(out)]) == 2
        assert "never overwritten" in capsys.readouterr().err
        assert released.read_bytes() == published and not (out / "refused.json").exists()


# --- inputs read once ---------------------------------------------------------------------------


def test_a_problem_swapped_during_the_release_is_not_what_is_released(
    tmp_path: Path, problem_file: Path, monkeypatch
) -> None:
    """The file is replaced by a 30-row problem after hashing, before the audit and the fit: the
    release audits and fits the 60 rows it hashed, and says so; check-release sees the swap."""
    monkeypatch.setattr(gate, "VERIFY_LEVEL", TINY)
    original = problem_file.read_bytes()
    audited = engine.run_audit

    def swap_then_audit(*args, **kwargs):
        small = random_problem(30, 4, seed=1)
        save(Problem(small.logp, small.sources, heldout_logp=small.logp[:5], task="t"), problem_file)
        return audited(*args, **kwargs)

    monkeypatch.setattr(lambda_kind, "run_audit", swap_then_audit)
    out = tmp_path / "r"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 0
    manifest = json.loads((out / "release.json").read_text())
    audit = json.loads((lambda_kind.work_folder(manifest["inputs"]) / "audit.json").read_text())
    assert audit["problem"]["n_mixing"] == manifest["audit"]["problem"]["n_mixing"] == 60
    import hashlib

    assert manifest["inputs"]["problem_sha256"] == hashlib.sha256(original).hexdigest()
    assert any("does not match" in p for p in check.check_release(out / "release.json"))


# --- check-release reads what a manifest claims -------------------------------------------------


def _edited(path: Path, edit) -> Path:
    manifest = json.loads(path.read_text())
    edit(manifest)
    manifest["manifest_sha256"] = manifest_digest(manifest)  # a consistent forgery
    forged = path.with_name(f"forged-{os.urandom(4).hex()}.json")
    forged.write_text(json.dumps(manifest))
    return forged


@pytest.mark.parametrize(
    "edit, code, message",
    [
        (lambda m: m["audit"].update(violation=True), 3, "own audit"),
        (lambda m: m["audit"]["results"][0].update(profile_violation=True), 3, "own audit"),
        (lambda m: m["verification"].update(passed=False), 3, "own verification"),
        (lambda m: m.update(weights=[0.9, 0.9, -0.8, 0.0]), 3, "simplex"),
        (lambda m: m.update(weights=m["weights"][:2]), 3, "one weight per source"),
        (lambda m: m["claim"].update(accountant="magic"), 3, "unknown accountant"),
        (lambda m: m["audit"].update(data_sha256="0" * 64), 3, "audit: it ran on other data"),
        (lambda m: m["audit"].update(noise_multiplier=100.0), 3, "audit: it ran noise_multiplier 100.0"),
        (lambda m: m["audit"].update(results=[{**m["audit"]["results"][0], "runs": 4}]), 3, "audit: its results"),
        (lambda m: m["audit"]["results"][0].update(runs=4), 3, "audit: a result ran other than"),
        (lambda m: m.update(sources=m["sources"][::-1]), 3, "sources: the manifest's"),
        (lambda m: m["claim"].update(noise_multiplier=0.01), 3, "claim: epsilon under pld cannot be recomputed"),
        (lambda m: m["spec"].update(steps=3), 3, "claim: steps"),
        (lambda m: m["claim"].update(steps=10**9), 2, "steps T must be in"),
        (lambda m: m["claim"].update(steps="10"), 2, "'steps' must be int"),
        (lambda m: m["claim"].update(noise_multiplier=True), 2, "'noise_multiplier' must be"),
        (lambda m: m.update(weights={"a": 1}), 2, "'weights' must be list"),
        (lambda m: m.update(claim=[]), 2, "'claim' must be dict"),
    ],
)
def test_check_release_reads_the_manifests_own_verdicts_and_types(
    capsys, released: Path, edit, code: int, message: str
) -> None:
    assert main(["check-release", str(_edited(released, edit))]) == code
    assert message in capsys.readouterr().err


# --- faults end in one line ----------------------------------------------------------------------


def _one_line(err: str) -> bool:
    return err.count("\n") == 1 and "Traceback" not in err


def test_ctrl_c_is_one_line_and_exit_130(capsys, monkeypatch, problem_file: Path) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("dpaudit_mix.learner.fit", interrupted)
    code, _, err = _mix(capsys, problem_file)
    assert code == cli.EXIT_INTERRUPTED and _one_line(err) and "rerun the same command to resume" in err


def test_a_full_disk_is_one_line(capsys, monkeypatch, tmp_path: Path, problem_file: Path) -> None:
    def full(path, obj):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(cli.common, "write_json", full)
    code = main(["mix", "--problem", str(problem_file), "--nonprivate", "--out", str(tmp_path / "w.json")])
    err = capsys.readouterr().err
    assert code == cli.EXIT_FAULT and _one_line(err) and "No space left" in err
    assert not (tmp_path / "w.json").exists()


def _cli(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpaudit_mix.cli", *argv], capture_output=True, text=True, **kwargs)


def test_a_closed_or_full_stdout_is_one_line() -> None:
    bound = ["bound", "--fp", "1", "--fn", "1", "--negatives", "100", "--positives", "100", "--delta", "1e-5"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "dpaudit_mix.cli", *bound], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert done.returncode == cli.EXIT_FAULT and _one_line(done.stderr), done.stderr
    reader, writer = os.pipe()
    os.close(reader)
    done = subprocess.run(
        [sys.executable, "-m", "dpaudit_mix.cli", *bound], stdout=writer, stderr=subprocess.PIPE, text=True
    )
    os.close(writer)
    assert done.returncode == cli.EXIT_FAULT and _one_line(done.stderr), done.stderr


def test_a_non_utf8_locale_is_not_a_traceback(tmp_path: Path) -> None:
    spec = tmp_path / "empty-grid.toml"
    spec.write_text("epsilons = []\n")
    done = _cli("pipeline", str(spec), env={**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
    assert done.returncode == 2 and "grid is empty" in done.stderr and _one_line(done.stderr), done.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["calibrate", "--epsilon", "1", "--delta", "1e-5", "--sample-rate", "1e-9", "--steps", "100"],
            "sample rate q",
        ),
        (
            ["account", "--noise-multiplier", "1", "--sample-rate", "0.01", "--steps", "1000000000", "--delta", "1e-5"],
            "steps T must be in",
        ),
    ],
)
def test_requests_no_accountant_can_answer_are_refused_up_front(capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "spec, message",
    [
        ("pretrain_examples = 1000000000000\n", "pretrain_examples"),
        ('world = "shakespeare-users"\npretrain_windows = 1000000000000\n', "pretrain_windows"),
    ],
)
def test_sizes_a_spec_asks_for_are_checked_against_memory(capsys, tmp_path: Path, spec: str, message: str) -> None:
    path = tmp_path / "big.toml"
    path.write_text(spec)
    assert main(["pipeline", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and "GiB of memory" in err and not (tmp_path / "out").exists()


def test_warmsyn_synthetic_size_is_checked_against_memory(capsys, tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_text("synthetic_size = 1000000000000\n")
    assert main(["warmsyn", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "synthetic_size" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_the_temp_file_of_a_killed_write_is_removed_by_the_next(tmp_path: Path) -> None:
    target = tmp_path / "chunk.npz"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".chunk.npz.{int(dead.stdout)}.abc123.tmp.npz"
    stale.write_bytes(b"half")
    mine = tmp_path / f".chunk.npz.{os.getpid()}.live99.tmp.npz"  # a live writer's: kept
    mine.write_bytes(b"busy")
    atomic.write_npz(target, x=np.zeros(2))
    assert not stale.exists() and mine.exists() and target.is_file()


def test_an_unusable_ledger_refuses_before_verification(
    capsys, tmp_path: Path, problem_file: Path, monkeypatch
) -> None:
    def never(*args, **kwargs):
        raise AssertionError("verification ran before the ledger was checked")

    monkeypatch.setattr(gate, "verify", never)
    (tmp_path / "damaged.sqlite").write_bytes(b"not a database" * 100)
    spec = write_spec(tmp_path, problem_file)
    for book in ("/proc/no-such-folder/ledger.sqlite", str(tmp_path / "damaged.sqlite")):
        assert main(["release", str(spec), "--out", str(tmp_path / "r"), "--ledger", book]) == 2
        err = capsys.readouterr().err
        assert _one_line(err) and "ledger" in err


# --- faults around the ledger: nothing jams the budget, nothing under-counts it -----------------


def test_a_commit_lost_after_release_json_is_recovered(capsys, tmp_path: Path, problem_file: Path, monkeypatch) -> None:
    """A crash between writing release.json and the ledger's commit: the signed, published release
    is committed by `ledger recover FOLDER` (or by the next release into that folder), never
    withdrawn; until then its reservation counts, and the failure's one line names the recovery."""
    from dpaudit_mix.release import ledger

    monkeypatch.setattr(gate, "VERIFY_LEVEL", TINY)
    committed = ledger.commit

    def lost(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(ledger, "commit", lost)
    out = tmp_path / "r"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 5
    err = capsys.readouterr().err
    assert "Input/output error" in err and "commit was lost" in err and f"ledger recover {out}" in err
    monkeypatch.setattr(ledger, "commit", committed)
    (open_one,) = ledger.read()
    assert open_one.status == "reserved" and (out / "release.json").exists()
    assert main(["ledger", "withdraw", open_one.id, "--why", "a mistake"]) == 2  # it was published
    assert "holds this reservation's release.json" in capsys.readouterr().err
    assert main(["check-release", str(out / "release.json")]) == 3  # not yet committed
    assert main(["ledger", "recover", str(out)]) == 0
    capsys.readouterr()
    (entry,) = ledger.read()
    assert (
        entry.status == "released"
        and entry.manifest_sha256 == json.loads((out / "release.json").read_text())["manifest_sha256"]
    )
    assert main(["check-release", str(out / "release.json")]) == 0
    assert ledger.verify_chain()[1] is None


def test_the_next_release_into_the_folder_commits_a_lost_commit(
    capsys, tmp_path: Path, problem_file: Path, monkeypatch
) -> None:
    from dpaudit_mix.release import ledger

    monkeypatch.setattr(gate, "VERIFY_LEVEL", TINY)
    committed = ledger.commit
    monkeypatch.setattr(ledger, "commit", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EIO, "lost")))
    spec, out = write_spec(tmp_path, problem_file), tmp_path / "r"
    assert main(["release", str(spec), "--out", str(out)]) == 5
    monkeypatch.setattr(ledger, "commit", committed)
    assert main(["release", str(spec), "--out", str(out)]) == 2
    assert "its lost commit was recovered" in capsys.readouterr().err
    assert [e.status for e in ledger.read()] == ["released"]


def test_a_fault_mid_release_keeps_its_reservation_until_withdrawn(
    capsys, tmp_path: Path, problem_file: Path, monkeypatch
) -> None:
    """A fault after the reservation (the disk, the machine): the reservation stays counted (the
    private work may have run) and the one line names the command that clears it."""
    from dpaudit_mix.release import ledger

    monkeypatch.setattr(gate, "VERIFY_LEVEL", TINY)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lambda_kind, "fit", full)
    out = tmp_path / "r"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 5
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dpaudit-mix:")]
    (reserved,) = ledger.read()
    assert len(said) == 1 and f"reservation {reserved.id} stays counted" in said[0]  # in its one line
    assert "No space left on device" in said[0] and not (out / "release.json").exists()
    assert main(["ledger", "withdraw", reserved.id, "--why", "the disk filled before the fit"]) == 0
    assert ledger.read() == [] and ledger.verify_chain()[1] is None
    rows = ledger.state().head
    assert rows is not None and rows.body["why"] == "the disk filled before the fit"


def test_two_releases_into_one_folder_at_once_one_is_refused(capsys, tmp_path: Path, problem_file: Path) -> None:
    from dpaudit_mix.base.owned import claimed
    from dpaudit_mix.release import ledger

    out = tmp_path / "r"
    with claimed(out):  # another release holds the folder
        assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 2
    assert "being released into by another command" in capsys.readouterr().err and ledger.read() == []


def test_a_kill_during_the_card_leaves_nothing_in_the_release_folder(tmp_path: Path, problem_file: Path) -> None:
    """The card and its figures (λ among them) are made beside --out and moved in whole once signed:
    a SIGKILL after lambda.png is drawn leaves the release folder without it; the next release
    into the folder clears what the killed one left beside it, and publishes."""
    from dpaudit_mix.release import ledger

    spec, out = write_spec(tmp_path, problem_file), tmp_path / "r"
    killed = (
        "import os, signal, sys\n"
        "from dpaudit_mix.release import gate, lambda_kind\n"
        "from dpaudit_mix.cli import main\n"
        "from tests.test_verify import TINY\n"
        "gate.VERIFY_LEVEL = TINY\n"
        "card = lambda_kind.write_card\n"
        "def drawn_then_killed(manifest, folder, fingerprint):\n"
        "    card(manifest, folder, fingerprint)\n"
        "    assert (folder / 'lambda.png').exists()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "lambda_kind.write_card = drawn_then_killed\n"
        "main(['release', sys.argv[1], '--out', sys.argv[2]])\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", killed, str(spec), str(out)], cwd=Path(__file__).parents[1], capture_output=True
    )
    assert run.returncode == -9, run.stderr.decode()[-2000:]
    assert list(out.iterdir()) == []  # neither lambda.png nor any other file of the card
    left = list(tmp_path.glob(f".r{gate.STAGING}*"))
    assert len(left) == 1 and (left[0] / "lambda.png").exists()  # the killed run's, beside --out
    (reserved,) = ledger.read()  # the private work ran: its reservation stays counted
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gate, "VERIFY_LEVEL", TINY)
        assert main(["release", str(spec), "--out", str(out)]) == 0
    assert not list(tmp_path.glob(f".r{gate.STAGING}*")) and (out / "lambda.png").exists()
    assert main(["check-release", str(out / "release.json")]) == 0  # nothing the killed run made is in it
    assert reserved.id in {e.id for e in ledger.read()}  # the killed run's reservation still counts


def test_an_out_folder_holding_other_files_is_refused_before_any_charge(
    capsys, tmp_path: Path, problem_file: Path
) -> None:
    """A release folder is published whole: a file the release does not write (a CSV of ids) would
    go out unlisted, so the folder is refused up front, the file untouched and nothing reserved."""
    from dpaudit_mix.release import ledger

    out = tmp_path / "r"
    out.mkdir()
    (out / "ids.csv").write_text("id\n7\n")
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 2
    assert "holds ids.csv, which a release does not write" in capsys.readouterr().err
    assert ledger.read() == [] and (out / "ids.csv").read_text() == "id\n7\n"


def test_an_out_that_is_a_symbolic_link_is_refused_and_its_target_untouched(
    capsys, tmp_path: Path, problem_file: Path
) -> None:
    """A refused --out was still written into: refused.json appeared in the link's target (found
    by an outside test). A release folder is written only where it is named."""
    from dpaudit_mix.release import ledger

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(tmp_path / "link") + "/"]) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert list((tmp_path / "real").iterdir()) == [] and ledger.read() == []
