"""Your own torch.nn.Module as the pipeline's network and proxies: registered once, checked at
the boundary, keyed by name, written and loaded back like the SmallCNN."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from torch import nn

from dpaudit_mix import load_model, register_network, run_pipeline_file
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.cli import main
from dpaudit_mix.models import cnn
from dpaudit_mix.models.networks import NETWORKS
from dpaudit_mix.pipeline.run import build_world
from dpaudit_mix.pipeline.spec import PipelineSpec

from .conftest import TINY_PIPELINE


class TinyMLP(nn.Module):
    """A user's network: no convolutions at all, a `head` as the last layer."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 16), nn.ReLU())
        self.head = nn.Linear(16, classes)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.head(self.body(x))


class WithBatchNorm(TinyMLP):
    def __init__(self, classes: int) -> None:
        super().__init__(classes)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 16), nn.BatchNorm1d(16), nn.ReLU())


class Headless(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.out = nn.Linear(28 * 28, classes)


def broken(classes: int) -> nn.Module:
    raise RuntimeError("no weights today")


@pytest.fixture
def tiny_mlp() -> Iterator[str]:
    register_network("tiny-mlp", TinyMLP)
    yield "tiny-mlp"
    NETWORKS.unregister("tiny-mlp")


def test_a_registered_network_is_pretrained_finetuned_written_and_loaded(tiny_mlp: str, tmp_path: Path) -> None:
    keys = {**TINY_PIPELINE, "methods": ["dpmixmin", "uniform"], "epsilons": [2.0]}
    spec = tmp_path / "mine.toml"
    lines = [f'network = "{tiny_mlp}"', 'proxy = "cnn"', f'proxy_network = "{tiny_mlp}"', "proxy_epochs = 1"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    spec.write_text("\n".join(lines) + "\n")
    summary = run_pipeline_file(str(spec), str(tmp_path / "out"), progress=False)
    assert summary.runs == 2
    index = json.loads((tmp_path / "out" / "models" / "index.json").read_text())
    assert {e["network"] for e in index} == {tiny_mlp}
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"cnn ({tiny_mlp}), 1 epochs proxies" in report
    model = load_model(tmp_path / "out" / "models" / index[0]["file"], tiny_mlp)
    assert isinstance(model, TinyMLP)
    world = build_world(PipelineSpec(**{**keys, "methods": ("dpmixmin", "uniform"), "epsilons": (2.0,)}))
    assert cnn.evaluate(model, world.test_images, world.test_labels)["macro_auc"] == index[0]["metrics"]["macro_auc"]
    with pytest.raises(InputError, match="not a smallcnn's"):
        load_model(tmp_path / "out" / "models" / index[0]["file"])  # the default network's shapes differ


@pytest.mark.parametrize(
    ("factory", "line"),
    [
        (WithBatchNorm, "is not Opacus-compatible"),
        (Headless, "an nn.Linear named head"),
        (broken, "factory(10) raised RuntimeError: no weights today"),
        ("not callable", "must be a factory"),
    ],
)
def test_a_network_that_cannot_be_dp_finetuned_is_refused_when_registered(factory: object, line: str) -> None:
    with pytest.raises(InputError, match=line.replace("(", r"\(").replace(")", r"\)")):
        register_network("refused", factory)  # type: ignore[arg-type]
    assert "refused" not in NETWORKS.names()


def test_an_unknown_network_is_exit_2_naming_the_known_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text('network = "resnet-9000"\n')
    assert main(["pipeline", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "resnet-9000" in err and "smallcnn" in err and not (tmp_path / "out").exists()
