"""A finished run answers a rerun at once, and only when nothing it reads or wrote has changed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from dpaudit_mix import finished
from dpaudit_mix.base.errors import EXIT_BAD_INPUT, EXIT_VIOLATION
from dpaudit_mix.problem import save

from .conftest import random_problem


class Command:
    """A stand-in command: it reads its spec's ``input`` file and writes one report from it."""

    def __init__(self, tmp_path: Path, code: int = 0) -> None:
        self.out, self.code, self.calls = tmp_path / "out", code, 0
        self.input = tmp_path / "input.txt"
        self.input.write_text("rows")
        self.spec = tmp_path / "spec.toml"
        self.spec.write_text(f'input = "{self.input}"\nruns = 3\n')

    def body(self) -> int:
        self.calls += 1
        self.out.mkdir(exist_ok=True)
        (self.out / "report.md").write_text(f"from {self.input.read_text()}, run {self.calls}")
        (self.out / "cache").mkdir(exist_ok=True)
        (self.out / "cache" / "stage.npz").write_text("cached")
        print(json.dumps({"out": str(self.out)}))
        print("dpaudit-mix: warning: cached x failed its check; recomputing", file=sys.stderr)
        print("dpaudit-mix: VIOLATION (stand-in)", file=sys.stderr)
        return self.code

    def __call__(self, **args: object) -> int:
        return finished.once("stand-in", self.out, {"spec": str(self.spec), **args}, self.spec, (), self.body)


def test_a_rerun_replays_what_the_finished_run_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    command = Command(tmp_path, code=EXIT_VIOLATION)
    assert command() == EXIT_VIOLATION
    first = capsys.readouterr()
    assert command(workers=4, backend="dask") == EXIT_VIOLATION  # where it runs is not what it computes
    again = capsys.readouterr()
    assert command.calls == 1
    assert again.out == first.out
    assert "VIOLATION (stand-in)" in again.err and "holds this run, finished" in again.err
    assert "warning" not in again.err  # a replay does not repeat warnings about work it does not do


@pytest.mark.parametrize(
    "change",
    ["edit the output", "remove the output", "edit the spec", "edit a file the spec names", "another argument"],
)
def test_any_change_runs_again(tmp_path: Path, change: str) -> None:
    command = Command(tmp_path)
    command()
    args: dict[str, object] = {}
    if change == "edit the output":
        (command.out / "report.md").write_text("edited")
    elif change == "remove the output":
        (command.out / "report.md").unlink()
    elif change == "edit the spec":
        command.spec.write_text(command.spec.read_text().replace("runs = 3", "runs = 4"))
    elif change == "edit a file the spec names":
        command.input.write_text("other rows")
    else:
        args = {"epsilon": 2.0}
    command(**args)
    assert command.calls == 2
    command(**args)
    assert command.calls == 2  # the new run is stamped in turn


def test_caches_are_not_outputs(tmp_path: Path) -> None:
    command = Command(tmp_path)
    command()
    (command.out / "cache" / "stage.npz").write_text("a stage entry checks itself")
    command()
    assert command.calls == 1


def test_an_input_error_or_an_input_edited_mid_run_is_not_stamped(tmp_path: Path) -> None:
    command = Command(tmp_path, code=EXIT_BAD_INPUT)
    command()
    command()
    assert command.calls == 2
    command.code = 0
    body = command.body

    def edits_its_input() -> int:
        command.input.write_text("rows edited while the run read them")
        return body()

    command.body = edits_its_input  # type: ignore[method-assign]
    command()
    command.body = body  # type: ignore[method-assign]
    command()
    assert command.calls == 4


@pytest.mark.parametrize("forgery", ["outside", "symlink", "garbage", "no files", "a code that is no result"])
def test_a_forged_stamp_only_costs_a_run(tmp_path: Path, forgery: str) -> None:
    command = Command(tmp_path)
    command()
    stamp = command.out / ".stand-in.finished"
    stored = json.loads(stamp.read_text())
    outside = tmp_path / "elsewhere.md"
    outside.write_text("x")
    if forgery == "outside":
        stored["files"] = {"../elsewhere.md": finished.sha256(outside)}
    elif forgery == "symlink":
        (command.out / "link.md").symlink_to(outside)
        stored["files"] = {"link.md": finished.sha256(outside)}
    elif forgery == "no files":
        stored["files"] = {}
    elif forgery == "a code that is no result":
        stored["code"] = "0"
    stamp.write_text("{not json" if forgery == "garbage" else json.dumps(stored))
    command()
    assert command.calls == 2


def test_the_cli_replays_a_finished_recovery(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The wiring, end to end on a small command that stamps: recovery on a problem file, which
    the key hashes (the spec names it)."""
    from dpaudit_mix.cli import main

    problem = tmp_path / "p.npz"
    save(random_problem(300, 4, seed=5), problem)
    spec = tmp_path / "recovery.toml"
    spec.write_text(f'problem = "{problem}"\nepsilons = [1.0]\nrhos = [0.2]\nseeds = 2\nk_values = [2, 4]\n')
    out = tmp_path / "rec"
    assert main(["recovery", str(spec), "--out", str(out)]) == 0
    first, said = capsys.readouterr()
    assert said.strip().splitlines()[-1] == f"dpaudit-mix: recovery of 1 (ε, ρ) cell; report {out}/report.html"
    mtime = os.stat(out / "report.md").st_mtime_ns
    assert main(["recovery", str(spec), "--out", str(out)]) == 0
    assert capsys.readouterr().out == first
    assert os.stat(out / "report.md").st_mtime_ns == mtime  # nothing was rewritten
    save(random_problem(300, 4, seed=6), problem)
    assert main(["recovery", str(spec), "--out", str(out)]) == 0
    assert "holds this run" not in capsys.readouterr().err
    assert os.stat(out / "report.md").st_mtime_ns != mtime
