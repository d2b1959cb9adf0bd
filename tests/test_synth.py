"""WarmSyn: EDM's formulas against their definitions, the warm-up pieces, and a tiny end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from dpaudit_mix.base.randomness import Key, stream, torch_scope
from dpaudit_mix.cli import main
from dpaudit_mix.models import edm
from dpaudit_mix.models.warmup import CUTOUT, SAM, augment
from dpaudit_mix.synth import quality

from .conftest import TINY_PIPELINE


def test_preconditioning_matches_its_definitions() -> None:
    sigma = torch.tensor([1e-6, 0.1, 0.5, 2.0, 80.0])
    d = edm.SIGMA_DATA
    torch.testing.assert_close(edm.c_skip(sigma), d**2 / (sigma**2 + d**2))
    torch.testing.assert_close(edm.c_out(sigma), sigma * d / torch.sqrt(sigma**2 + d**2))
    torch.testing.assert_close(edm.c_in(sigma), 1 / torch.sqrt(sigma**2 + d**2))
    torch.testing.assert_close(edm.c_noise(sigma), torch.log(sigma) / 4)
    torch.testing.assert_close(edm.loss_weight(sigma), (sigma**2 + d**2) / (sigma * d) ** 2)


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor, noise: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return x


def test_denoiser_is_the_input_at_zero_noise_and_the_weighted_identity() -> None:
    x = torch.randn(4, 196)
    labels = torch.arange(4)
    net = edm.MLPNet()
    tiny = torch.full((4,), 1e-8)
    torch.testing.assert_close(edm.denoise(net, x, tiny, labels), x, atol=1e-6, rtol=0)  # σ → 0: D(x) = x
    sigma = torch.tensor([0.05, 0.5, 3.0, 40.0])
    expected = (edm.c_skip(sigma) + edm.c_out(sigma) * edm.c_in(sigma))[:, None] * x  # F = identity
    torch.testing.assert_close(edm.denoise(Identity(), x, sigma, labels), expected)


def test_the_sampler_schedule_runs_from_sigma_max_to_sigma_min_then_zero() -> None:
    t = edm.sigma_steps()
    assert len(t) == edm.STEPS + 1 and t[-1] == 0
    assert t[0].item() == pytest.approx(edm.SIGMA_MAX) and t[-2].item() == pytest.approx(edm.SIGMA_MIN)
    assert bool(torch.all(t[:-1][1:] < t[:-1][:-1]))
    i = 5  # Eq. 5 at an interior step
    rho = edm.RHO
    expected = (
        edm.SIGMA_MAX ** (1 / rho) + i / (edm.STEPS - 1) * (edm.SIGMA_MIN ** (1 / rho) - edm.SIGMA_MAX ** (1 / rho))
    ) ** rho
    assert t[i].item() == pytest.approx(expected, rel=1e-6)


def test_a_sampled_image_comes_from_a_trained_denoiser() -> None:
    rng = np.random.default_rng(0)
    images = np.zeros((20, 28, 28), np.float32)
    images[:, 8:20, 8:20] = 1.0  # one bright square per image: easy to learn
    images += 0.02 * rng.random(images.shape).astype(np.float32)
    # 400 steps: the square's margin over the corner is 0.80 already at 300 (0.84 at 1,000)
    net = edm.train(images, np.zeros(20, np.int64), edm.TrainConfig(steps=400, batch=20), Key(0))
    sample = edm.sample(net, np.zeros(8, np.int64), Key(0))
    assert sample.shape == (8, 28, 28) and sample.min() >= 0 and sample.max() <= 1
    assert sample[:, 10:18, 10:18].mean() > sample[:, :4, :4].mean() + 0.5  # the square, not noise


#: pixels this far from the border are always sampled from inside the image (shift 2 px, scale
#: 10%, rotation 10°: at most about 5.8 px of displacement), so affine padding never zeroes them.
INTERIOR = 6


def test_augmentation_cuts_out_exactly_one_square() -> None:
    out = augment(torch.ones(64, 1, 28, 28), stream(0, "warmup", test="cutout").torch())[:, 0]
    inner = out[:, INTERIOR:-INTERIOR, INTERIOR:-INTERIOR] == 0  # zeros here are Cutout's alone
    counts = inner.flatten(1).sum(1)
    assert int(counts.max()) == CUTOUT * CUTOUT  # some hole lies wholly inside: one 8×8 square, no more
    for hole in inner[counts > 0]:
        rows, cols = torch.nonzero(hole, as_tuple=True)
        assert int(rows.max() - rows.min()) < CUTOUT and int(cols.max() - cols.min()) < CUTOUT
        assert int(hole.sum()) == (int(rows.max() - rows.min()) + 1) * (int(cols.max() - cols.min()) + 1)  # solid
    assert float(out[:, INTERIOR:-INTERIOR, INTERIOR:-INTERIOR][~inner].min()) > 0.99  # the rest is the image


def test_sam_steps_with_the_gradient_at_the_perturbed_weights() -> None:
    """On L(w) = ‖w‖²: g = 2w, ε = ρ g/‖g‖, and SGD applies ∇L(w + ε) = 2(w + ε) at w."""
    with torch_scope(stream(0, "model-init")):
        model = torch.nn.Linear(3, 1, bias=False)
    w = model.weight.detach().clone()
    base = torch.optim.SGD(model.parameters(), lr=0.1)
    sam = SAM(list(model.parameters()), base, rho=0.3)
    sam.step(lambda: model.weight.pow(2).sum().backward())
    expected = w - 0.1 * 2 * (w + 0.3 * w / w.norm())
    torch.testing.assert_close(model.weight.detach(), expected)
    plain = w - 0.1 * 2 * w  # what SGD without the perturbation would give: far enough to tell apart
    assert float((expected - plain).norm()) > 0.05


def test_memorisation_flags_copies() -> None:
    rng = np.random.default_rng(1)
    train, holdout = rng.random((30, 28, 28)), rng.random((30, 28, 28))
    copies = quality.memorisation(train + 1e-3, train, holdout)
    fresh = quality.memorisation(rng.random((30, 28, 28)), train, holdout)
    assert copies["ratio"] < 0.01 and copies["synthetic_closer_than_any_real_share"] == 1.0
    assert 0.8 < fresh["ratio"] < 1.2


def warmsyn_spec(tmp_path: Path, **keys: object) -> Path:
    """A tiny WarmSyn spec file: the end-to-end test's sizes, with ``keys`` replaced."""
    values = {
        "public_size": 40,
        "synthetic_size": 200,
        "edm_steps": 30,
        "epsilons": [2.0],
        "seeds": 2,
        "warmup_steps": 10,
        "finetune_epochs": 1,
        "sensitive_fraction": 0.2,
        **keys,
    }
    path = tmp_path / "tiny.toml"
    path.write_text("".join(f"{key} = {value}\n" for key, value in values.items()))
    return path


def test_warmsyn_end_to_end_and_cached(capsys, tmp_path: Path) -> None:
    spec = warmsyn_spec(tmp_path)
    out = tmp_path / "out"
    assert main(["warmsyn", str(spec), "--out", str(out)]) == 0
    result = json.loads((out / "warmsyn.json").read_text())
    assert len(result["records"]) == 5 * 2 and {e["row"] for e in result["effects"]} == {
        "warm",
        "warmsyn",
        "augment",
        "sam",
    }
    assert all(r["finetune_epsilon"] <= 2.0 + 1e-9 for r in result["records"])
    assert "Cold" in (out / "report.md").read_text() and (out / "ablation.png").exists()
    stamps = {p: p.stat().st_mtime_ns for p in (out / "cache").rglob("*") if p.is_file()}
    assert main(["warmsyn", str(spec), "--out", str(out)]) == 0  # a rerun recomputes nothing
    assert {p: p.stat().st_mtime_ns for p in (out / "cache").rglob("*") if p.is_file()} == stamps
    assert json.loads((out / "warmsyn.json").read_text())["records"] == result["records"]


def test_the_synthetic_set_is_one_more_source_for_dp_mixmin(monkeypatch, tmp_path: Path) -> None:
    from dpaudit_mix.data import registry, synthetic
    from dpaudit_mix.pipeline.run import build_world, run_pipeline
    from dpaudit_mix.pipeline.spec import PipelineSpec

    monkeypatch.setattr(synthetic, "EDM_STEPS", 30)
    monkeypatch.setattr(synthetic, "SIZE", 100)
    spec = PipelineSpec(methods=("dpmixmin",), synthetic_source=True, **{**TINY_PIPELINE, "public_fraction": 1.0})
    world = build_world(spec)
    names = [s.name for s in world.sources]
    assert names[:-1] == [s.name for s in registry.world_sources(spec.world, spec.seed)[0]] and names[-1] == "synthetic"
    made = world.sources[-1]
    public = registry.world_validation(spec.world, spec.seed).images[: synthetic.PUBLIC]
    assert np.array_equal(np.bincount(made.labels), np.full(10, 10))  # class-balanced EDM samples
    nearest = np.min(((made.images[:, None] - public[None]) ** 2).sum(axis=(2, 3)), axis=1)
    assert nearest.min() > 0  # samples, not copies of the public slice
    weights = run_pipeline(spec, tmp_path, progress=False, world=world)[0].mixture.weights
    assert len(weights) == 15 and weights.min() >= 0 and weights.sum() == pytest.approx(1.0)


def test_warmsyn_finishes_with_one_warning_when_its_cache_cannot_be_written(capsys, tmp_path: Path) -> None:
    """Every stage is held in memory, never read back from the cache (the cache folder is a file here)."""
    spec = warmsyn_spec(
        tmp_path,
        public_size=20,
        synthetic_size=20,
        edm_steps=3,
        epsilons=[4.0],
        seeds=1,
        warmup_steps=2,
        sensitive_fraction=0.05,
    )
    out = tmp_path / "out"
    out.mkdir()
    (out / "cache").write_text("not a folder")
    assert main(["warmsyn", str(spec), "--out", str(out)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "cannot write the stage cache" in warnings[0]
    assert len(json.loads((out / "warmsyn.json").read_text())["records"]) == 5
