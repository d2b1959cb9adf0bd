"""One place builds the learner from a spec (:func:`dpaudit_mix.learner.learner_config`): every
:class:`LearnerConfig` field reaches the learner from every spec kind, the audited learner is
the released one, and both audit engines assemble their shared summary fields once."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import pytest

from dpaudit_mix import accounting
from dpaudit_mix.audit.many_run.result import AuditSummary
from dpaudit_mix.audit.run_once import OneRunSummary
from dpaudit_mix.audit.spec import AuditSpec
from dpaudit_mix.audit.verdict import SUMMARY_FIELDS, summary_fields
from dpaudit_mix.learner import RUN_FIELDS, LearnerConfig, learner_config, learner_settings
from dpaudit_mix.pipeline.methods import mix_learner
from dpaudit_mix.pipeline.spec import PipelineSpec
from dpaudit_mix.recovery.spec import RecoverySpec
from dpaudit_mix.release.lambda_audit import audit_spec
from dpaudit_mix.release.spec import ReleaseSpec

from .conftest import random_problem

#: a value for every field a spec may give, none of them a default.
PLANTED: dict[str, Any] = {"steps": 7, "clip": 2.5, "sample_rate": 0.5, "learning_rate": 0.3, "user_level": True}
SETTINGS = {f.name for f in fields(LearnerConfig)} - set(RUN_FIELDS)


def test_the_planted_values_cover_every_setting_and_differ_from_its_default() -> None:
    assert set(PLANTED) == SETTINGS, "a LearnerConfig field was added: plant it here and give every spec kind it"
    defaults = LearnerConfig()
    assert all(PLANTED[name] != getattr(defaults, name) for name in SETTINGS)


def _of(config: LearnerConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in SETTINGS}


@pytest.mark.parametrize("kind", [AuditSpec, ReleaseSpec])
def test_every_setting_reaches_the_learner_of_an_audit_or_release_spec(kind: type) -> None:
    spec = kind(**PLANTED)
    config = spec.learner(0.7)
    assert _of(config) == PLANTED and config.noise_multiplier == 0.7


def test_the_audit_of_a_release_runs_the_released_learner() -> None:
    release = ReleaseSpec(**PLANTED)
    audited = audit_spec(release, random_problem(20, 3, 0), {"problem": "p.npz"}, runs=1000)
    assert audited.learner(0.7) == release.learner(0.7)
    assert release.learner(0.7, secure=True).secure and not audited.learner(0.7).secure


def test_every_setting_reaches_a_recovery_cell() -> None:
    spec = RecoverySpec(**{k: v for k, v in PLANTED.items() if k != "user_level"})
    assert _of(spec.config(0.7, user_level=True)) == PLANTED  # a cell's level is the grid's


def test_every_setting_reaches_the_pipelines_mixture_learner() -> None:
    spec = PipelineSpec(mix_steps=7, mix_clip=2.5, mix_learning_rate=0.3)
    phase = accounting.GaussianPhase(0.7, 1.0, 7)
    config = mix_learner(spec, phase, user_level=True, secure=True)
    assert _of(config) == {**PLANTED, "sample_rate": 1.0} and config.noise_multiplier == 0.7 and config.secure
    tuned = mix_learner(spec, phase, tuned={"clip": 9.0, "learning_rate": 0.05})
    assert (tuned.clip, tuned.learning_rate) == (9.0, 0.05)


def test_a_spec_without_a_setting_is_an_error_naming_it_never_a_default() -> None:
    @dataclass(frozen=True)
    class Partial:
        steps: int = 7
        clip: float = 2.5

    with pytest.raises(TypeError, match="Partial has no sample_rate"):
        learner_config(Partial())
    assert learner_settings(Partial(), sample_rate=0.5, learning_rate=0.3, user_level=True) == PLANTED
    with pytest.raises(TypeError, match="not settings of the learner"):
        learner_settings(Partial(), sample_rate=0.5, learning_rate=0.3, user_level=True, momentum=0.9)


def test_both_audit_engines_summaries_share_their_fields() -> None:
    one_run = [f.name for f in fields(OneRunSummary)]
    many_run = [f.name for f in fields(AuditSummary)]
    assert tuple(one_run) == SUMMARY_FIELDS
    assert [f for f in many_run if f not in SUMMARY_FIELDS] == ["threshold_strategy", "claimed_tradeoff"]

    @dataclass(frozen=True)
    class Found:
        name: str
        noise: bool
        exceeds: bool

    @dataclass(frozen=True)
    class Plan:
        noise_multiplier: float = 0.5
        calibrated_noise_multiplier: float = 1.0
        problem: dict[str, Any] | None = None
        canaries: dict[str, Any] | None = None

    results = [Found("a-noise", True, False), Found("a-nonoise", False, False), Found("b-nonoise", False, True)]
    spec = AuditSpec(epsilon=2.0, confidence=0.9)
    got = summary_fields(spec, Plan(), results, lambda r: r.exceeds, 0.45)  # type: ignore[arg-type]
    assert tuple(got) == SUMMARY_FIELDS
    assert not got["violation"] and got["inconclusive"] and got["blind_controls"] == ("a-nonoise",)
    assert (got["claimed_epsilon"], got["confidence_per_result"], got["noise_multiplier"]) == (2.0, 0.45, 0.5)
