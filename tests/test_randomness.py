"""Named streams: reproducible, independent, and never shared by two tasks, methods or purposes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr

from dpaudit_mix import accounting
from dpaudit_mix.audit.many_run.engine import run_audit
from dpaudit_mix.audit.spec import AuditSpec
from dpaudit_mix.base import randomness
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import Key, recording, stream, torch_scope
from dpaudit_mix.learner import LearnerConfig, fit
from dpaudit_mix.pipeline import methods
from dpaudit_mix.pipeline.run import run_pipeline
from dpaudit_mix.pipeline.spec import PipelineSpec
from dpaudit_mix.problem import Problem, save
from dpaudit_mix.recovery.grid import run_recovery
from dpaudit_mix.recovery.spec import RecoverySpec

from .conftest import random_problem
from .test_pipeline import TINY


def test_same_name_same_draws_any_other_name_other_draws() -> None:
    a = stream(3, "learner-noise", task="t", epsilon=1.0, seed=0)
    assert np.array_equal(
        a.numpy().random(5), stream(3, "learner-noise", task="t", epsilon=1, seed=0).numpy().random(5)
    )
    others = [
        stream(4, "learner-noise", task="t", epsilon=1.0, seed=0),  # root seed
        stream(3, "finetune-noise", task="t", epsilon=1.0, seed=0),  # purpose
        stream(3, "learner-noise", task="u", epsilon=1.0, seed=0),  # task
        stream(3, "learner-noise", task="t", epsilon=2.0, seed=0),  # ε
        stream(3, "learner-noise", task="t", epsilon=1.0, seed=1),  # seed
        stream(3, "learner-noise", task="t", epsilon=1.0, seed=0, run=0),
    ]
    draws = [s.numpy().random(5) for s in [a, *others]] + [a.run(0).random(5), a.run(1).random(5)]
    assert len({d.tobytes() for d in draws}) == len(draws)
    assert a.integer() == stream(3, "learner-noise", task="t", epsilon=1.0, seed=0).integer()


def test_names_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown stream purpose"):
        stream(0, "learner-nosie")
    with pytest.raises(ValueError, match="named twice"):
        Key(0).child(task="a").child(task="b")
    with pytest.raises(ValueError, match="root seed"):
        Key(-1)
    with pytest.raises(ValueError, match="world layout"):
        randomness.world_layout(0, "poool")


def test_torch_scope_seeds_inside_and_restores_outside() -> None:
    before = torch.random.get_rng_state()
    with torch_scope(stream(0, "model-init")):
        first = torch.rand(3)
    assert torch.equal(torch.random.get_rng_state(), before)
    with torch_scope(stream(0, "model-init")):
        assert torch.equal(torch.rand(3), first)


def test_a_fit_needs_exactly_one_source_of_noise(small_problem: Problem) -> None:
    with pytest.raises(InputError, match="named stream"):
        fit(small_problem, LearnerConfig(noise_multiplier=1.0), 2)
    with pytest.raises(InputError, match="named stream"):
        fit(small_problem, LearnerConfig(noise_multiplier=1.0, secure=True), 2, stream(0, "learner-noise"))


def _repeated(draws: list) -> list:
    return [name for name, count in Counter(draws).items() if count > 1]


def test_a_tiny_pipeline_recovery_and_audit_never_draw_one_stream_twice(tmp_path: Path) -> None:
    """Every stream a run opens, by purpose and identifiers: no two alike (docs/concepts/pipeline.md)."""
    spec = PipelineSpec(methods=("dpmixmin", "random_search"), **{**TINY, "epsilons": (1.0, 2.0), "seeds": 2})
    with recording() as pipeline_draws:
        run_pipeline(spec, tmp_path / "pipeline", progress=False)
    purposes = {purpose for purpose, _ in pipeline_draws}
    assert {
        "learner-noise",
        "random-search-candidates",
        "random-search-noise",
        "finetune-noise",
        "finetune-batches",
        "pretrain-sample",
        "pretrain-shuffle",
        "model-init",
        "pipeline-split",
    } <= purposes
    fits = {ids[:-1] for purpose, ids in pipeline_draws if purpose == "learner-noise"}  # less the run id
    assert len(fits) == 2 * 2  # one DP-MixMin fit per (ε, seed), each with streams of its own
    assert _repeated(pipeline_draws) == []

    problem = random_problem(200, 4, seed=3)
    path = tmp_path / "p.npz"
    save(
        Problem(
            problem.logp,
            problem.sources,
            users=np.arange(200) // 4,
            heldout_logp=random_problem(10, 4, seed=4).logp,
            task="t",
        ),
        path,
    )
    with recording() as recovery_draws:
        run_recovery(
            RecoverySpec(
                problem=str(path), epsilons=(1.0, 2.0), rhos=(0.5, 1.0), seeds=3, steps=10, k_values=(2, 3), k_rho=0.5
            ),
            progress=False,
        )
    assert len(recovery_draws) > 10 and _repeated(recovery_draws) == []

    audit = AuditSpec(problem=str(path), runs=128, steps=5, rho=0.5, natural_policy="random", chunk_size=64)
    with recording() as audit_draws:
        run_audit(audit, tmp_path / "audit", progress=False)
    assert _repeated(audit_draws) == []
    runs = [dict(ids) for purpose, ids in audit_draws if purpose == "learner-noise"]
    assert len(runs) == 4 * 128  # 2 canaries × (noise, σ = 0 control) × runs, each its own stream
    assert len({(r["audit"], r["run"]) for r in runs}) == len(runs)


def _noise(problem: Problem, spec: PipelineSpec, seeds: int, names: dict[str, object]) -> np.ndarray:
    """DP-MixMin's λ minus its σ = 0 fit, in centred log λ, for seeds 0..seeds−1: the noise alone."""

    def centred_log(weights: np.ndarray) -> np.ndarray:
        log = np.log(weights)
        return log - log.mean()

    exact = fit(
        problem,
        LearnerConfig(steps=spec.mix_steps, clip=spec.mix_clip),
        1,
        stream(0, "learner-noise", test="noiseless"),
    ).weights[0]
    return np.stack(
        [
            centred_log(
                methods.choose(
                    "dpmixmin", split_a=problem, full=problem, epsilon=1.0, spec=spec, seed=seed, names=names
                ).weights
            )
            - centred_log(exact)
            for seed in range(seeds)
        ]
    )


@pytest.mark.parametrize(
    "other",
    [
        {"split": "row-a", "task": "digit-2"},  # two tasks of one per-task run
        {"split": "row-b", "task": "digit-1"},  # one task in two rows (another proxy or ρ)
    ],
)
def test_two_tasks_or_rows_dpmixmin_noise_in_one_seed_is_uncorrelated(monkeypatch, other) -> None:
    """The same data under two names (so only the stream can differ): with a shared stream the
    noise would be identical (r = 1); with their own streams r is ~N(0, 1/√N)."""
    monkeypatch.setattr(accounting, "calibrate", lambda *args, **kwargs: 20.0)  # the noise, not σ, is tested
    problem = random_problem(200, 5, seed=9)
    spec = PipelineSpec(mix_steps=20)
    first = _noise(problem, spec, 150, {"split": "row-a", "task": "digit-1"})
    second = _noise(problem, spec, 150, other)
    again = _noise(problem, spec, 150, {"split": "row-a", "task": "digit-1"})
    assert np.array_equal(first, again)  # same names, same seed: same noise (reproducible)
    assert np.std(first) > 0.05  # the noise is there to be compared
    r, p = pearsonr(first.ravel(), second.ravel())
    assert abs(r) < 4 / np.sqrt(first.size) and p > 1e-4


def test_two_methods_private_noise_in_one_seed_is_uncorrelated() -> None:
    """DP-MixMin's and random search's Gaussian noise in one task, ε and seed come from their own
    streams: their draws are uncorrelated."""
    ids = {"task": "digit-1", "epsilon": 1.0, "seed": 0}
    mix = stream(0, "learner-noise", **ids, method="dpmixmin").run(0).standard_normal(4000)
    search = stream(0, "random-search-noise", **ids).numpy().standard_normal(4000)
    r, _ = pearsonr(mix, search)
    assert abs(r) < 4 / np.sqrt(4000)
