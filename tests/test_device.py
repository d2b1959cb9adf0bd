"""--device / the ``device`` key: what can be checked on a machine without a GPU."""

from pathlib import Path

import numpy as np
import pytest
import torch

from dpaudit_mix.base.errors import InputError
from dpaudit_mix.models.device import resolve, resolved
from dpaudit_mix.pipeline.methods import Mixture
from dpaudit_mix.pipeline.run import build_world, image_track, run_pipeline
from dpaudit_mix.pipeline.spec import PipelineSpec
from dpaudit_mix.pipeline.stages import Job, StageCache

from .conftest import TINY_PIPELINE as TINY


@pytest.mark.parametrize("present", [True, False])
def test_auto_takes_cuda_only_when_present(monkeypatch, present: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
    assert resolve("auto") == ("cuda" if present else "cpu")
    assert resolve("cpu") == "cpu"
    if present:
        assert resolve("cuda") == "cuda"
    else:
        with pytest.raises(InputError, match="torch sees no CUDA GPU"):
            resolve("cuda")


def test_a_spec_names_a_known_device() -> None:
    with pytest.raises(InputError, match="device must be one of cpu, cuda, auto, got 'gpu'"):
        PipelineSpec(device="gpu")


def test_a_cpu_run_is_unchanged_and_a_gpu_run_is_cached_apart(monkeypatch, tmp_path: Path) -> None:
    """``auto`` without a GPU is the CPU run, stage for stage (same keys, same results); the
    stages of a CUDA run have keys of their own, so a GPU's last-bit differences never mix
    with cached CPU stages."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = PipelineSpec(methods=("uniform",), **TINY)
    world = build_world(spec)
    cpu = [r.to_dict() for r in run_pipeline(spec, tmp_path / "cpu", progress=False, world=world)]
    auto = PipelineSpec(methods=("uniform",), device="auto", **TINY)
    assert [r.to_dict() for r in run_pipeline(auto, tmp_path / "auto", progress=False, world=world)] == cpu

    def files(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}

    assert files(tmp_path / "cpu" / "cache") == files(tmp_path / "auto" / "cache")

    job, mixture = Job("uniform", 2.0, 0, "multiclass"), Mixture(np.full(len(world.sources), 0.5), None)

    def keys(device: str) -> tuple[str, str]:
        track = image_track(
            PipelineSpec(methods=("uniform",), device=device, **TINY), world, StageCache(None), False, False
        )
        pretrain = track.pretrain(job, mixture)
        assert pretrain is not None
        return pretrain.key, track.finetune(job, None, pretrain.key, ()).key

    on_cpu, on_gpu = keys("cpu"), keys("cuda")  # a spec may name cuda; only running it needs a GPU
    assert on_cpu[0] != on_gpu[0] and on_cpu[1] != on_gpu[1]
    with pytest.raises(InputError, match="torch sees no CUDA GPU"):
        resolved(PipelineSpec(device="cuda"))
