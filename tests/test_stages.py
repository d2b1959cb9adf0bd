"""The stage machine on a toy track: each stage computed once, a rerun computes nothing, an
unwritable cache costs nothing but time, privacy composed once, and the rehearsal rule."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpaudit_mix import accounting
from dpaudit_mix.base.randomness import Key
from dpaudit_mix.pipeline.methods import Mixture
from dpaudit_mix.pipeline.stages import (
    Job,
    Rehearsal,
    Stage,
    StageCache,
    choose_by_rehearsal,
    mixture_draw,
    preflight,
    release_privacy,
    run_stages,
)

MIX = accounting.GaussianPhase(4.0, 1.0, 10)
TUNE = accounting.GaussianPhase(2.0, 0.1, 50)


class ToyTrack:
    """Two methods × two seeds; pretraining depends on the seed alone, so jobs share it."""

    delta = 1e-5

    def __init__(self, sequential: bool = False, finetune_kind: str = "json") -> None:
        self.sequential, self.finetune_kind = sequential, finetune_kind
        self.calls: dict[str, int] = {"mixture": 0, "pretrain": 0, "finetune": 0}
        self.calibrated: list[tuple[float, tuple[accounting.GaussianPhase, ...]]] = []

    def jobs(self) -> list[Job]:
        return [Job(m, 2.0, s) for m in ("dp", "free") for s in (0, 1)]

    def mixing_phases(self, epsilon: float) -> list[accounting.GaussianPhase]:
        return [MIX]

    def calibrations(self, epsilon: float) -> list[accounting.CalibrationRequest]:
        return []

    def calibrate(self, epsilon: float, prior: tuple[accounting.GaussianPhase, ...]) -> None:
        self.calibrated.append((epsilon, prior))

    def _count(self, stage: str, value: Any) -> Any:
        self.calls[stage] += 1
        return value

    def mixture(self, job: Job) -> Stage[Mixture] | None:
        if job.method == "free":
            return None
        return Stage(f"mix-{job.seed}", lambda: self._count("mixture", Mixture(np.array([0.25, 0.75]), MIX)))

    def pretrain(self, job: Job, mixture: Mixture) -> Stage[dict[str, np.ndarray]] | None:
        return Stage(f"pre-{job.seed}", lambda: self._count("pretrain", {"w": np.full(3, float(job.seed))}))

    def finetune(self, job: Job, start: Any, start_key: str | None, prior: tuple) -> Stage[dict[str, Any]]:
        def compute() -> dict[str, Any]:
            return self._count(
                "finetune",
                {
                    "score": float(start["w"].sum()) + len(prior),
                    "finetune_phase": asdict(TUNE),
                    "finetune_epsilon": 1.5,
                    **({"model": {"w": start["w"] + 1}} if self.finetune_kind == "finetuned" else {}),
                },
            )

        return Stage(f"tune-{job.method}-{job.seed}-{start_key}-{len(prior)}", compute)


def test_every_stage_runs_once_and_a_rerun_runs_none(tmp_path: Path) -> None:
    track = ToyTrack()
    runs = run_stages(track, StageCache(tmp_path), progress=False)
    assert track.calls == {"mixture": 2, "pretrain": 2, "finetune": 4}  # pretraining shared across methods
    again = ToyTrack()
    rerun = run_stages(again, StageCache(tmp_path), progress=False)
    assert again.calls == {"mixture": 0, "pretrain": 0, "finetune": 0}
    assert [r.to_dict() for r in rerun] == [r.to_dict() for r in runs]
    assert [r.result["score"] for r in runs] == [0.0, 3.0, 0.0, 3.0]
    assert runs[0].mixture.weights.tolist() == [0.25, 0.75] and runs[2].mixture.weights is None


def test_a_kept_model_comes_back_from_the_cache_beside_its_result(tmp_path: Path) -> None:
    runs = run_stages(ToyTrack(finetune_kind="finetuned"), StageCache(tmp_path), progress=False)
    again = ToyTrack(finetune_kind="finetuned")
    rerun = run_stages(again, StageCache(tmp_path), progress=False)
    assert again.calls["finetune"] == 0 and [r.to_dict() for r in rerun] == [r.to_dict() for r in runs]
    assert all("model" not in r.result for r in rerun)  # weights travel beside the result, not in it
    assert [r.model["w"].tolist() for r in rerun if r.model is not None] == [[1.0] * 3, [2.0] * 3] * 2
    plain = run_stages(ToyTrack(), StageCache(tmp_path / "json"), progress=False)
    assert all(r.model is None for r in plain)  # a track that keeps no model has none


def test_an_entry_swapped_under_another_key_is_recomputed_not_used(capsys, tmp_path: Path) -> None:
    """Probe #32: one stage's output copied, sidecar and all, over another's was used as it; the
    sidecar hashes the key first, so the swapped entry fails and only it is recomputed."""
    reference = [r.to_dict() for r in run_stages(ToyTrack(), StageCache(tmp_path), progress=False)]
    cache = StageCache(tmp_path)
    seed0, seed1 = (cache._path("pretrain", f"pre-{seed}", "arrays") for seed in (0, 1))
    assert seed0 is not None and seed1 is not None
    for suffix in ("", ".sha256"):
        (seed0.parent / (seed0.name + suffix)).write_bytes((seed1.parent / (seed1.name + suffix)).read_bytes())
    track = ToyTrack()
    runs = [r.to_dict() for r in run_stages(track, StageCache(tmp_path), progress=False)]
    assert track.calls == {"mixture": 0, "pretrain": 1, "finetune": 0}
    assert runs == reference
    assert "belongs to another key" in capsys.readouterr().err


def test_an_unwritable_cache_warns_once_and_gives_the_same_runs(capsys, tmp_path: Path) -> None:
    reference = [r.to_dict() for r in run_stages(ToyTrack(), StageCache(tmp_path / "ok"), progress=False)]
    (tmp_path / "file").write_text("not a folder")
    track = ToyTrack()
    runs = run_stages(track, StageCache(tmp_path / "file"), progress=False)
    assert [r.to_dict() for r in runs] == reference
    assert track.calls == {"mixture": 2, "pretrain": 2, "finetune": 4}  # held in memory, never re-read
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "cannot write the stage cache" in warnings[0]


def test_sequential_runs_compose_the_mixture_with_the_finetune(tmp_path: Path) -> None:
    runs = run_stages(ToyTrack(sequential=True), StageCache(tmp_path), progress=False)
    dp, free = runs[0], runs[2]
    assert dp.result["score"] == 0.0 + 1  # the finetune was given the mixture's phase as its prior
    assert dp.privacy.epsilon_total == pytest.approx(accounting.epsilon([MIX, TUNE], 1e-5))
    assert free.privacy.epsilon_total == pytest.approx(accounting.epsilon([TUNE], 1e-5))


def test_parallel_privacy_is_the_larger_of_the_two_splits() -> None:
    mixed = release_privacy(Mixture(np.array([0.5, 0.5]), MIX), TUNE, 1.5, 1e-5, sequential=False)
    assert mixed.epsilon_total == pytest.approx(max(1.5, accounting.epsilon([MIX], 1e-5)))
    assert release_privacy(Mixture(None, None), TUNE, 1.5, 1e-5, sequential=False).epsilon_total == 1.5
    bound = release_privacy(Mixture(np.array([0.5, 0.5]), None, releasable=False), TUNE, 1.5, 1e-5, False)
    assert not bound.releasable and bound.epsilon_total == float("inf")


def test_preflight_calibrates_the_finetune_alone_and_after_each_mixture() -> None:
    parallel, sequential = ToyTrack(), ToyTrack(sequential=True)
    preflight(parallel, [1.0, 2.0])
    preflight(sequential, [1.0])
    assert parallel.calibrated == [(1.0, ()), (2.0, ())]
    assert sequential.calibrated == [(1.0, ()), (1.0, (MIX,))]


def test_preflight_searches_every_sigma_without_a_prior_side_by_side_not_here(monkeypatch) -> None:
    """The text track's σ (each ε's finetune, DP-MixMin's and random search's phases) are searched
    in children at once; this process then answers them all without a search of its own, so a
    request the track's ``calibrations`` left out would fail here."""
    import os
    from types import SimpleNamespace

    from dpaudit_mix.lm.run import TextTrack
    from dpaudit_mix.lm.spec import TextPipelineSpec

    world = SimpleNamespace(user_windows=[None] * 80, split_a=np.arange(16), split_b=np.arange(16, 80))
    track = TextTrack(TextPipelineSpec(epsilons=(1.25, 2.5)), world, secure=False)  # type: ignore[arg-type]
    asked = [request for eps in (1.25, 2.5) for request in track.calibrations(eps)]
    assert len(asked) == 6 and sorted({request[2] for request in asked}) == [0.5, 1.0]  # q = 32 of 64 users
    parent, afresh = os.getpid(), accounting.calibration.calibrate_afresh

    def in_a_child_only(*key: Any) -> float:
        assert os.getpid() != parent, f"searched in the parent: {key}"
        return afresh(*key)

    accounting.clear_caches()
    monkeypatch.setattr(accounting.calibration, "calibrate_afresh", in_a_child_only)
    preflight(track, [1.25, 2.5])
    phases = [phase for eps in (1.25, 2.5) for phase in track.mixing_phases(eps)]
    assert [p.steps for p in phases] == [100, 1, 100, 1]  # dpmixmin, random search
    assert track.sigma(2.5, ())[1] < track.sigma(1.25, ())[1]


def test_rehearsal_picks_the_best_candidate_in_streams_of_its_own() -> None:
    candidates = [{"learning_rate": 0.1, "epochs": 1}, {"learning_rate": 0.3, "epochs": 2}]
    stage = Key(0).child(task="t", method="m", epsilon=1.0, seed=0)
    seen = []

    def rehearse(candidate: dict[str, float], key: Key) -> float:
        seen.append(key)
        return -abs(candidate["learning_rate"] - 0.3)

    higher = Rehearsal("scores", "score", higher_is_better=True)
    choice = choose_by_rehearsal(candidates, rehearse, higher, stage)
    assert (choice["learning_rate"], choice["epochs"]) == (0.3, 2)
    assert [c["score"] for c in choice["scores"]] == pytest.approx([-0.2, 0.0])
    assert len(set(seen)) == 2 and stage not in seen  # one child key per candidate, never the finetune's own
    lower = choose_by_rehearsal(candidates, rehearse, Rehearsal("scores", "score", False), stage)
    assert lower["learning_rate"] == 0.1
    assert choose_by_rehearsal(candidates[:1], rehearse, higher, stage) == candidates[0]  # nothing to rehearse


def test_mixture_draw_follows_lambda_and_its_stream() -> None:
    def draw() -> list[np.ndarray]:
        return mixture_draw([10, 1000, 5], [0.0, 0.9, 0.1], 20_000, Key(3).stream("pretrain-sample").numpy())

    picks = draw()
    assert len(picks[0]) == 0 and abs(len(picks[1]) / 20_000 - 0.9) < 0.01 and sum(map(len, picks)) == 20_000
    assert all(p.max(initial=-1) < size for p, size in zip(picks, [10, 1000, 5], strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(picks, draw(), strict=True))  # same stream, same draw
