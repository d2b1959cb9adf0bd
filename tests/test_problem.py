from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix.base.errors import InputError
from dpaudit_mix.problem import Problem, load, save


def test_round_trip(tmp_path: Path, small_problem: Problem) -> None:
    held = small_problem.logp[:7]
    prob = Problem(
        small_problem.logp,
        small_problem.sources,
        users=np.arange(300) // 2,
        heldout_logp=held,
        task="t",
        meta={"name": "x"},
    )
    save(prob, tmp_path / "p.npz")
    back = load(tmp_path / "p.npz")
    np.testing.assert_array_equal(back.logp, prob.logp)
    np.testing.assert_array_equal(back.users, prob.users)
    np.testing.assert_array_equal(back.heldout_logp, held)
    assert back.sources == prob.sources and back.task == "t" and back.meta == {"name": "x"}
    assert [p.name for p in tmp_path.iterdir()] == ["p.npz"]  # no temp file left behind


@pytest.mark.parametrize(
    "logp, message",
    [
        (np.array([[np.nan, -1.0], [-1.0, -2.0]]), "NaN"),
        (np.array([[np.inf, -1.0], [-1.0, -2.0]]), "NaN or infinite"),
        (np.array([[0.5, -1.0], [-1.0, -2.0]]), "positive"),
        (np.array([[-1.0], [-2.0]]), "k >= 2"),
        (np.zeros((0, 3)), "n = 0"),
        (np.array([-1.0, -2.0]), "2-D"),
    ],
)
def test_bad_logp(logp: np.ndarray, message: str) -> None:
    with pytest.raises(InputError, match=message):
        Problem(logp, tuple(f"s{i}" for i in range(logp.shape[-1])))


def test_shape_mismatches(small_problem: Problem) -> None:
    with pytest.raises(InputError, match="sources has"):
        Problem(small_problem.logp, ("a", "b"))
    with pytest.raises(InputError, match="users must have one id"):
        Problem(small_problem.logp, small_problem.sources, users=np.arange(5))
    with pytest.raises(InputError, match="heldout_logp has 3 sources"):
        Problem(small_problem.logp, small_problem.sources, heldout_logp=np.zeros((2, 3)) - 1)


def test_missing_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load(tmp_path / "absent.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip archive")
    with pytest.raises(InputError, match="a text file"):
        load(bad)
    np.savez(tmp_path / "nologp.npz", sources=np.array(["a", "b"]))
    with pytest.raises(InputError, match="lacks the required array 'logp'"):
        load(tmp_path / "nologp.npz")
