"""A model file is read without pickle, and anything that is not a SmallCNN's state is one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import Key
from dpaudit_mix.models import cnn, networks


def weights() -> dict[str, np.ndarray]:
    return cnn.state_arrays(cnn.from_arrays(None, Key(0).child(test="model file")))


def test_weights_round_trip(tmp_path: Path) -> None:
    state = weights()
    np.savez(tmp_path / "m.npz", **state)
    loaded = cnn.state_arrays(networks.load_model(tmp_path / "m.npz"))
    assert loaded.keys() == state.keys() and all(np.array_equal(loaded[k], state[k]) for k in state)


@pytest.mark.parametrize(
    ("fault", "line"),
    [
        ("no head", "no head.bias vector"),
        ("extra array", "are not a smallcnn's"),
        ("wrong shape", "are not a smallcnn's"),
        ("nan", "is not finite float32"),
        ("float64", "is not finite float32"),
        ("object", "object"),
    ],
)
def test_a_file_that_is_no_smallcnn_is_refused(tmp_path: Path, fault: str, line: str) -> None:
    state = weights()
    if fault == "no head":
        del state["head.bias"]
    elif fault == "extra array":
        state["backdoor"] = np.zeros(3, np.float32)
    elif fault == "wrong shape":
        state["head.weight"] = state["head.weight"][:, :5]
    elif fault == "nan":
        state["head.weight"][0, 0] = np.nan
    elif fault == "float64":
        state["head.weight"] = state["head.weight"].astype(np.float64)
    else:
        state["head.bias"] = np.array([object()] * 10)
    np.savez(tmp_path / "m.npz", **state)
    with pytest.raises(InputError, match=line):
        networks.load_model(tmp_path / "m.npz")


def test_a_text_model_round_trips_and_a_cnn_file_is_no_chargru(tmp_path: Path) -> None:
    from dpaudit_mix.models import chargru

    state = cnn.state_arrays(chargru.new_model(Key(0).child(test="chargru file")))
    np.savez(tmp_path / "g.npz", **state)
    loaded = cnn.state_arrays(chargru.load_model(tmp_path / "g.npz"))
    assert all(np.array_equal(loaded[k], state[k]) for k in state)
    np.savez(tmp_path / "m.npz", **weights())
    with pytest.raises(InputError, match="are not a chargru's"):
        chargru.load_model(tmp_path / "m.npz")
