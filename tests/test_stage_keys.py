"""Stage cache keys, read from the tracks themselves: changing any spec field changes some stage's
key, unless the spec class declares (in UNKEYED, with the reason) that it cannot change an output.
A field left out of a hand-written key would let a stale cache entry be reused."""

from __future__ import annotations

import copy
from dataclasses import fields
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from torch import nn

from dpaudit_mix import accounting, register_network
from dpaudit_mix.lm.run import TextTrack
from dpaudit_mix.lm.spec import TextPipelineSpec
from dpaudit_mix.pipeline.methods import Mixture
from dpaudit_mix.pipeline.run import ImageTrack, proxies_stage
from dpaudit_mix.pipeline.spec import PipelineSpec
from dpaudit_mix.pipeline.stages import Job

#: values a perturbed field takes where "another value of the same kind" would not be accepted.
CHOICES: dict[str, Any] = {
    "world": "mnist-shift",
    "proxy": "cnn",
    "proxy_epochs": 3,
    "composition": "sequential",
    "rehearsal_genre": "tragedies",
    "finetune_rows": 3,
    "device": "cuda",  # a spec's device is resolved (cpu or cuda) before any stage is keyed
    "network": "stage-keys-net",  # a registered network (below)
    "proxy_network": "stage-keys-net",
}


#: where a field only matters beside another setting, both the spec and its perturbation have it.
CONTEXT: dict[str, dict[str, Any]] = {
    "proxy_epochs": {"proxy": "cnn"},  # a logistic proxy has no epochs
    "proxy_network": {"proxy": "cnn"},
    "rehearsal_genre": {"finetune_learning_rates": (1e-3, 3e-3)},  # rehearsals run for a grid only
}


class _OtherNet(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.head = nn.Linear(28 * 28, classes)


register_network(CHOICES["network"], _OtherNet, replace=True)


def _other(name: str, value: Any) -> Any:
    if name in CHOICES:
        return CHOICES[name]
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, tuple):
        return (*value, value[0] if value else 0.5)
    return (0.5,) if value is None else None


def image_keys(spec: PipelineSpec) -> dict[str, str]:
    world = SimpleNamespace(train_labels=np.zeros(10), split_b=np.arange(5))
    track = ImageTrack(spec, world, lambda task: (None, None), secure=False)  # type: ignore[arg-type]
    return _keys(track, "multiclass") | {"proxies": proxies_stage(spec, world, False).key}  # type: ignore[arg-type]


def text_keys(spec: TextPipelineSpec) -> dict[str, str]:
    world = SimpleNamespace(user_windows=[None] * 10, split_a=np.arange(5), split_b=np.arange(5, 10), source_windows=[])
    return _keys(TextTrack(spec, world, secure=False), "lm")  # type: ignore[arg-type]


def _keys(track: Any, task: str) -> dict[str, str]:
    """Every stage key of one private job: its mixture, pretraining and finetune."""
    job = Job("dpmixmin", 2.0, 0, task)
    mixture = Mixture(np.array([0.25, 0.75]), accounting.GaussianPhase(3.0, 1.0, 10))
    pretrain = track.pretrain(job, mixture)
    prior = (mixture.phase,)
    return {
        "mixture": track.mixture(job).key,
        "pretrain": pretrain.key,
        "finetune": track.finetune(job, None, pretrain.key, prior).key,
    }


@pytest.mark.parametrize(("spec_class", "keys"), [(PipelineSpec, image_keys), (TextPipelineSpec, text_keys)])
def test_every_field_changes_a_stage_key_or_is_declared_not_to(spec_class, keys) -> None:
    names = {f.name for f in fields(spec_class)}
    assert set(spec_class.UNKEYED) <= names, "UNKEYED names a field the spec does not have"
    for name in sorted(names):
        spec = spec_class(**CONTEXT.get(name, {}))
        changed = copy.copy(spec)
        object.__setattr__(changed, name, _other(name, getattr(spec, name)))  # the key, not validity
        moved = keys(changed) != keys(spec)
        assert moved != (name in spec_class.UNKEYED), (
            f"{name} changes no stage key and is not declared unkeyed"
            if not moved
            else f"{name} is declared unkeyed but changes a stage key"
        )
