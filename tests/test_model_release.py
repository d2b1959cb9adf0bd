"""The finetuned model released through the gate (release/model.py): reserve, verify, train once
with canaries, audit that run, publish weights that load without pickle; check-release on them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from dpaudit_mix import accounting
from dpaudit_mix.base.npz import load
from dpaudit_mix.cli import main
from dpaudit_mix.models import cnn
from dpaudit_mix.release import gate, ledger, model_check
from dpaudit_mix.release.manifest import manifest_digest

from .conftest import TINY_PIPELINE
from .test_verify import TINY

#: verification still runs (and must pass) before the model trains, with one monotone axis: what
#: these tests exercise is the model path (test_release.py runs the gate at TINY).
BARE = replace(TINY, name="bare", monotone={"noise_multiplier": (1.0, 2.0)})


@pytest.fixture(autouse=True)
def bare_verification(monkeypatch) -> None:
    monkeypatch.setattr(gate, "VERIFY_LEVEL", BARE)


def _specs(tmp_path: Path, **keys: object) -> Path:
    pipeline = tmp_path / "pipeline.toml"
    # 4 finetune epochs: a member canary is then sampled in at least one step in 99 % of them
    methods = ["dpmixmin", "uniform", "no_pretrain", "nonprivate_mixmin"]
    settings = {**TINY_PIPELINE, "methods": methods, "finetune_epochs": 4}
    pipeline.write_text(
        "".join(f"{k} = {json.dumps(list(v) if isinstance(v, tuple) else v)}\n" for k, v in settings.items())
    )
    spec = tmp_path / "model.toml"
    base = {
        "pipeline": "pipeline.toml",
        "method": "dpmixmin",
        "epsilon": 2.0,
        "canaries": 1000,
        "detect": 3.0,  # what 1000 canaries catch at this claim (2.0 takes 10,000: the power test below)
        **keys,
    }
    spec.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in base.items()))
    return spec


def test_a_model_release_publishes_audited_weights_that_check_and_load(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r"
    assert main(["release", str(_specs(tmp_path)), "--out", str(out)]) == 0
    manifest = json.loads((out / "release.json").read_text())
    assert manifest["kind"] == "model" and manifest["manifest_sha256"] == manifest_digest(manifest)
    claim, audit = manifest["claim"], manifest["audit"]
    assert claim["composition"] == "parallel" and claim["epsilon"] == max(
        claim["mixture_epsilon"], claim["finetune_epsilon"]
    )
    assert claim["epsilon"] <= 2.0 + 1e-3
    assert audit["one_run"] and not audit["violation"] and audit["canaries"] == 1000
    assert audit["detect"] == 3.0 and not audit["planned"] and audit["power"]["detects"] <= 3.0
    assert audit["seconds"]["finetune"] > 0 and audit["seconds"]["audit"] > 0
    assert audit["noise_multiplier"] == claim["finetune_phase"]["noise_multiplier"]
    assert len(manifest["mixture"]["weights"]) == len(manifest["mixture"]["sources"])
    # the ledger charged both phases of the model, each to its split: the spend is the max, as the claim says
    entry = ledger.read(tmp_path / "ledger.sqlite")[0]
    assert entry.status == "released" and entry.manifest_sha256 == manifest["manifest_sha256"]
    assert [p.noise_multiplier for p in entry.phases] == [
        claim["mixture_phase"]["noise_multiplier"],
        claim["finetune_phase"]["noise_multiplier"],
    ]
    assert [p.rsplit(":", 1)[1] for p in entry.parts] == ["A", "B"] and manifest["data"]["identity"] == "sensitive"
    spent, _, _ = ledger.standing(tmp_path / "ledger.sqlite", entry.data_sha256, "")
    assert spent == manifest["budget"]["spent_epsilon"] == pytest.approx(claim["epsilon"], rel=1e-9)
    sequential = accounting.epsilon(entry.phases, claim["delta"])
    assert spent < sequential  # parallel: never the sequential composition of the two splits
    # the weights load without pickle into the CNN, hold no canary coordinate, and are the model scored
    weights = load(out / "model.npz", "weights")
    model = cnn.SmallCNN()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})  # strict: no extra coordinate
    from dpaudit_mix.data import registry

    _, sensitive = registry.world_sources("mnist", 0)
    metrics = cnn.evaluate(model, sensitive.test_images, sensitive.test_labels)
    assert metrics["macro_auc"] == pytest.approx(manifest["metrics"]["macro_auc"], abs=1e-9)
    # beside it on the card, what costs no further privacy: λ's pretraining before the finetune, and chance
    baselines = manifest["baselines"]
    assert set(baselines) == {"pretrained_only", "chance"}
    assert all(set(b) == set(manifest["metrics"]) for b in baselines.values())
    assert baselines["chance"]["macro_auc"] == 0.5
    labels = sensitive.test_labels
    assert baselines["chance"]["accuracy"] == pytest.approx(np.bincount(labels).max() / len(labels))
    assert baselines["pretrained_only"]["macro_auc"] != manifest["metrics"]["macro_auc"]
    power = manifest["audit"]["power"]
    for name in ("release.md", "release.html"):
        card = (out / name).read_text()
        assert "pretrained on λ, no finetune" in card and f"{baselines['chance']['accuracy']:.4f}" in card
        assert "One-run audit of this very finetune" in card and "f-DP bound" in card
        assert f"{power['tight_lower_bound']:.3f}" in card and "this audit catches" in card
        assert f"The audit took {audit['seconds']['audit']:.1f} s" in card
    capsys.readouterr()
    assert main(["check-release", str(out / "release.json")]) == 0
    # edited weights are refused
    edited = dict(weights)
    edited["head.bias"] = edited["head.bias"] + 1e-3
    np.savez(out / "model.npz", **edited)
    assert main(["check-release", str(out / "release.json")]) == 3
    assert "the weights were changed after release" in capsys.readouterr().err


def test_a_finetune_that_adds_less_noise_than_claimed_is_refused_and_publishes_nothing(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """The optimizer adds noise at σ = 0.05 while the claim (and the verification) say the
    calibrated σ: the one-run audit of that very finetune refuses it."""
    from dpaudit_mix.models import opacus_sgd

    own_noise = opacus_sgd.own_noise

    def quieter(optimizer, gaussians) -> None:
        own_noise(optimizer, gaussians)
        add_noise = optimizer.add_noise

        def leaking() -> None:
            sigma = optimizer.noise_multiplier
            optimizer.noise_multiplier = 0.05
            try:
                add_noise()
            finally:
                optimizer.noise_multiplier = sigma

        optimizer.add_noise = leaking

    monkeypatch.setattr(opacus_sgd, "own_noise", quieter)
    out = tmp_path / "r"
    spec = _specs(tmp_path, method="no_pretrain")  # no λ to fit, no pretraining: the finetune alone
    assert main(["release", str(spec), "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert "REFUSED (audit)" in err and "one-run audit of this very finetune" in err
    assert sorted(p.name for p in out.iterdir()) == ["refused.json"]
    assert ledger.read(tmp_path / "ledger.sqlite") == []  # the reservation was withdrawn


def test_a_noise_multiplier_below_the_calibrated_one_is_refused_before_training(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r"
    spec = _specs(tmp_path, method="no_pretrain")
    assert main(["release", str(spec), "--out", str(out), "--noise-multiplier", "0.05"]) == 3
    assert "REFUSED (claim)" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["refused.json"]
    assert ledger.read(tmp_path / "ledger.sqlite") == []  # nothing was charged


def test_a_model_release_with_too_few_canaries_for_its_detect_is_refused_before_training(
    tmp_path: Path, capsys
) -> None:
    """1000 canaries catch σ/3 at this claim: ``detect = 2`` is refused at stage power naming the
    canaries that would (with 95 % confidence that σ/2 is caught in 90 % of audits: 20,000),
    before the verification, the ledger or the finetune."""
    out = tmp_path / "r"
    assert main(["release", str(_specs(tmp_path, detect=2.0)), "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert "REFUSED (power)" in err and "canaries = 1000 catches σ/3" in err and "canaries = 20000 would" in err
    assert sorted(p.name for p in out.iterdir()) == ["refused.json"]
    assert ledger.read(tmp_path / "ledger.sqlite") == []


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"method": "random_search"}, "is not one the pipeline runs"),
        ({"method": "nonprivate_mixmin"}, "cannot be released"),
        ({"epsilon": 3.0}, "is not one of the pipeline's"),
        ({"task": "digit-3"}, "is not one the pipeline runs"),
        ({"canaries": 5}, "canaries must be >= 20"),
        ({"pipeline": "missing.toml"}, "missing.toml"),
    ],
)
def test_a_model_release_spec_the_pipeline_does_not_run_exits_2(
    tmp_path: Path, capsys, keys: dict, message: str
) -> None:
    out = tmp_path / "r"
    assert main(["release", str(_specs(tmp_path, **keys)), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (out / "model.npz").exists() and not (out / "release.json").exists()
    assert ledger.read(tmp_path / "ledger.sqlite") == []


def test_the_shipped_model_release_spec_names_what_its_pipeline_runs() -> None:
    from dpaudit_mix.base.specfile import load_spec_file
    from dpaudit_mix.pipeline.release import ModelReleaseSpec, pipeline_path
    from dpaudit_mix.pipeline.spec import load_pipeline_spec

    path = Path(__file__).parent.parent / "releases" / "model.toml"
    spec = load_spec_file(ModelReleaseSpec, path)
    pipeline = load_pipeline_spec(pipeline_path(path, spec.pipeline))
    assert spec.method in pipeline.methods and spec.epsilon in pipeline.epsilons
    assert len(pipeline.finetune_grid) == 1 and spec.canaries is None and spec.detect == 2.0  # planned


@pytest.mark.parametrize(
    ("change", "found"),
    [
        ({}, []),
        ({"metrics": {"auc": float("nan")}}, ["metrics: not an object of rates in [0, 1]"]),
        ({"baselines": {"chance": {"auc": 1.5}}}, ["baselines.chance: not an object of rates in [0, 1]"]),
        (
            {"baselines": {"chance": {"acc": 0.5}}},
            ["baselines.chance: its metrics are not the released model's ['auc']"],
        ),
        ({"baselines": [0.5]}, ["baselines: not an object"]),
    ],
)
def test_check_release_reads_the_cards_metrics_as_rates(change: dict, found: list[str]) -> None:
    manifest = {"metrics": {"auc": 0.7}, "baselines": {"chance": {"auc": 0.5}}, **change}
    assert model_check._metrics_problems(manifest) == found
