"""The held-out metrics of models/cnn.py on labels that leave some digit without an AUC: a user's
data of three classes scores those three (never a NaN that a card would print and check-release
refuse), chance has the same names, and a task the labels cannot score is refused before training."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import stream, torch_scope
from dpaudit_mix.cli import main
from dpaudit_mix.models import cnn
from tests.test_trust import _world

#: a held-out set of three classes, as in a user's own data.
LABELS = np.arange(30) % 3


def _images() -> np.ndarray:
    return (
        stream(0, "pretrain-sample", test="held-out-metrics").numpy().random((len(LABELS), 28, 28)).astype(np.float32)
    )


def test_only_the_digits_present_are_scored_and_chance_names_the_same() -> None:
    with torch_scope(stream(0, "model-init", test="held-out-metrics")):
        model = cnn.SmallCNN()
    metrics = cnn.evaluate(model, _images(), LABELS)
    assert set(metrics) == {"digit-0", "digit-1", "digit-2", "macro_auc", "accuracy"}
    assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in metrics.values())
    assert metrics["macro_auc"] == pytest.approx(np.mean([metrics[f"digit-{d}"] for d in range(3)]))
    assert set(cnn.chance_metrics(LABELS, "multiclass")) == set(metrics)
    assert cnn.auc_digits(np.array([4, 4, 7])) == (4, 7)


@pytest.mark.parametrize(
    ("labels", "task", "message"),
    [
        (np.zeros(10, dtype=np.int64), "multiclass", "all one class"),
        (LABELS, "digit-5", "need both digit-5 and the rest"),
        (np.full(10, 5), "digit-5", "need both digit-5 and the rest"),
    ],
)
def test_a_task_the_labels_cannot_score_is_refused(labels: np.ndarray, task: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        cnn.require_scorable(labels, task)
    cnn.require_scorable(LABELS, "digit-2")


def test_a_per_task_pipeline_on_three_classes_exits_2_before_it_trains(capsys, tmp_path: Path) -> None:
    """digit-3 has no AUC on a user's three classes: one line and exit 2, no output folder."""
    data = _world(tmp_path / "data")
    spec = tmp_path / "spec.toml"
    spec.write_text(f'data = "{data}"\nprotocol = "per_task"\n')
    out = tmp_path / "out"
    assert main(["pipeline", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "need both digit-3 and the rest" in err and len(err.strip().splitlines()) == 1 and not out.exists()
