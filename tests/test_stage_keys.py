"""Stage cache keys: every spec field is in some stage's key or declared not to affect results,
and changing a keyed field changes that stage's key (no stale cache entry can be reused)."""

from __future__ import annotations

import copy
from dataclasses import fields

import pytest

from dpaudit_mix.lm.spec import TextPipelineSpec
from dpaudit_mix.pipeline.spec import PipelineSpec, stage_key, unkeyed_fields

SPECS = (PipelineSpec, TextPipelineSpec)


def _other(value: object) -> object:
    """A value of the same kind as ``value`` that differs from it (validity does not matter: the
    key is all that is computed)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, tuple):
        return (*value, value[0] if value else 1)
    return (1,) if value is None else None


@pytest.mark.parametrize("spec_class", SPECS, ids=lambda c: c.__name__)
def test_every_field_is_keyed_or_declared_not_to_affect_results(spec_class) -> None:
    names = {f.name for f in fields(spec_class)}
    assert unkeyed_fields(spec_class) == set()
    keyed = {name for stage in spec_class.KEYED.values() for name in stage}
    assert not keyed & set(spec_class.UNKEYED), "a field is both keyed and declared unkeyed"
    assert keyed | set(spec_class.UNKEYED) <= names, "a declaration names no field of the spec"


@pytest.mark.parametrize("spec_class", SPECS, ids=lambda c: c.__name__)
def test_changing_a_keyed_field_changes_its_stages_key_and_no_other_field_does(spec_class) -> None:
    spec = spec_class()
    for stage, names in spec_class.KEYED.items():
        before = stage_key(spec, stage, job="j")
        for f in fields(spec_class):
            changed = copy.copy(spec)
            object.__setattr__(changed, f.name, _other(getattr(spec, f.name)))
            moved = stage_key(changed, stage, job="j") != before
            assert moved == (f.name in names), (stage, f.name)


def test_a_field_left_out_of_every_key_is_caught(monkeypatch) -> None:
    """The check the first test makes, shown to fail: drop finetune_clip from the finetune key."""
    keyed = {**PipelineSpec.KEYED, "finetune": tuple(n for n in PipelineSpec.KEYED["finetune"] if n != "finetune_clip")}
    monkeypatch.setattr(PipelineSpec, "KEYED", keyed)
    assert unkeyed_fields(PipelineSpec) == {"finetune_clip"}
