"""Work done alongside in a forked child: it runs while the block runs, the block's end waits for
it, an exception kills it, and its failures stay silent (the caller redoes the work)."""

import os
import time
from pathlib import Path

import pytest

from dpaudit_mix.base import resources


def _wait_for(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _answer_when_asked(asked: Path, answer: Path) -> None:
    """The child's work: it needs the block to have started (``asked``), then writes ``answer``."""
    if _wait_for(asked, 30):
        answer.write_text("done")


def test_the_child_works_while_the_block_runs_and_the_block_end_waits_for_it(tmp_path: Path) -> None:
    asked, answer = tmp_path / "asked", tmp_path / "answer"
    with resources.alongside(_answer_when_asked, asked, answer=answer):
        asked.write_text("go")  # the child answers only once the block has run this far
    assert answer.read_text() == "done"


def test_an_exception_in_the_block_kills_the_child_at_once(tmp_path: Path, monkeypatch) -> None:
    forked: list[int] = []
    fork = os.fork

    def recording() -> int:
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(resources.os, "fork", recording)
    start = time.monotonic()
    with (
        pytest.raises(RuntimeError, match="refused"),
        resources.alongside(_answer_when_asked, tmp_path / "never", tmp_path / "answer"),
    ):
        raise RuntimeError("refused")
    assert time.monotonic() - start < 10
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0], os.WNOHANG)  # already reaped
    assert not (tmp_path / "answer").exists()


def _fail() -> None:
    print("a message nobody should see")
    raise ValueError("the child's own failure")


def test_the_childs_failure_is_silent(capfd) -> None:
    with resources.alongside(_fail):
        pass
    assert capfd.readouterr() == ("", "")
