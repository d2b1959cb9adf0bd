"""Worlds with a controllable share of bad sources (issue #37): label-permuted copies, more
Animal-MNIST distractors, and a scarce finetune set, as pipeline spec keys."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit_mix.base.errors import InputError
from dpaudit_mix.data import registry
from dpaudit_mix.data.shift import DISTRACTOR_SIZE, bad_sources
from dpaudit_mix.pipeline.run import build_world, image_track
from dpaudit_mix.pipeline.spec import MAX_DISTRACTORS, PipelineSpec
from dpaudit_mix.pipeline.stages import StageCache


def test_permuted_copies_keep_the_images_and_move_every_label():
    sources, _ = registry.world_sources("mnist-shift", 0)
    added = bad_sources(sources, 6, 2)
    assert [s.name for s in added] == [
        *(f"{s.name}-permuted" for s in sources[:6]),
        "animals-c",
        "animals-d",
    ]
    for original, copy in zip(sources[:6], added[:6], strict=True):
        assert copy.images is original.images and len(copy.labels) == len(original.labels)
        assert not np.any(copy.labels == original.labels)  # a derangement: no example keeps its label
        mapping = {int(a): int(b) for a, b in zip(original.labels, copy.labels, strict=True)}
        assert sorted(mapping.values()) == sorted(mapping)  # one fixed permutation of the classes
    assert all(len(s.labels) == DISTRACTOR_SIZE for s in added[6:])
    assert bad_sources(sources, 6, 2)[0].labels.tolist() == added[0].labels.tolist()  # seeded by the world
    with pytest.raises(InputError, match="the world has 19 sources to copy"):
        bad_sources(sources, 20, 0)


def test_the_pipeline_spec_adds_them_and_cuts_the_finetune():
    spec = PipelineSpec(world="mnist-shift", permuted_sources=6, finetune_rows=135, sensitive_fraction=0.5)
    world = build_world(spec)
    assert len(world.sources) == 27 and sum(s.name.endswith("-permuted") for s in world.sources) == 6
    track = image_track(spec, world, StageCache(None), False, False)
    assert len(track.rows) == 135 and np.all(np.isin(track.rows, world.split_b))
    with pytest.raises(InputError, match="distractor_sources must be 0 … 8"):
        PipelineSpec(world="mnist-shift", distractor_sources=MAX_DISTRACTORS + 1)
    too_many = PipelineSpec(world="mnist-shift", finetune_rows=5000, sensitive_fraction=0.5)
    with pytest.raises(InputError, match="finetune_rows = 5000, but the finetune has 1080 rows"):
        image_track(too_many, build_world(too_many), StageCache(None), False, False)


@pytest.mark.parametrize("seeds", [2, 1])  # one seed: no test, so every p is NaN, and the map is drawn still
def test_a_map_spec_runs_its_cells_and_draws_the_heat_map(tmp_path, capsys, seeds):
    import json

    from dpaudit_mix.cli import main

    spec = tmp_path / "map.toml"
    spec.write_text(
        f'world = "mnist-shift"\nepsilons = [1.0]\nseeds = {seeds}\n'
        'methods = ["dpmixmin", "uniform", "nonprivate_mixmin"]\n'
        "sensitive_fraction = 0.25\npublic_fraction = 0.25\npretrain_epochs = 1\nfinetune_epochs = 1\n"
        "permuted_sources_grid = [0, 6]\npretrain_examples_grid = [200]\nfinetune_rows_grid = [60]\n"
    )
    assert main(["pipeline", str(spec), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr()
    summary = json.loads(printed.out)
    assert f"dpaudit-mix: pipeline done; report {tmp_path / 'out'}/report.html" in printed.err
    assert set(summary["endpoints"]) >= {"lambda_star_minus_uniform", "dpmixmin_minus_uniform"}
    assert len(summary["endpoints"]["dpmixmin_minus_uniform"]) == 2  # one per cell
    report = (tmp_path / "out" / "report.md").read_text()
    assert "The map: DP-MixMin − uniform" in report and (tmp_path / "out" / "map.png").stat().st_size > 1000
