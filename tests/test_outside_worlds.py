"""Worlds from outside the package, pluggable by what they offer (the Protocols of
:mod:`dpaudit_mix.data.worlds`), never by the class they are: an image world and a text world
registered the way a user's code would, each run through its pipeline (the image one with
DP-MixMin's C and η rehearsed on its public problem)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import dpaudit_mix as dm
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.cli import main
from dpaudit_mix.data import registry, worlds
from dpaudit_mix.data.ngram import text_arrays
from dpaudit_mix.data.problems import image_problem, text_problem
from dpaudit_mix.data.proxies import TASKS, ProxySpec
from dpaudit_mix.data.sources import PublicSource, SensitiveData
from dpaudit_mix.data.text_files import TextSet
from dpaudit_mix.problem import Problem


@dataclass(frozen=True)
class MyImages:
    """A user's image world: three shifted copies of a few images, a sensitive set and a test set."""

    name: str = "outside-images"
    tasks: tuple[str, ...] = TASKS

    def _images(self, count: int, shift: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        rng = stream(seed, "synthetic-inputs", world=self.name, shift=shift, count=count).numpy()
        labels = np.arange(count) % 10
        images = np.zeros((count, 28, 28), dtype=np.float32)
        for i, label in enumerate(labels):
            images[i, 4 + label : 10 + label, 4 + shift : 20 + shift] = 1.0
        images += 0.1 * rng.random(images.shape, dtype=np.float32)
        return np.clip(images, 0, 1), labels.astype(np.int64)

    def sources(self, seed: int, shards: int) -> tuple[list[PublicSource], SensitiveData]:
        public = [PublicSource(f"shift-{s}", *self._images(200, s, seed)) for s in (0, 3, 6)]
        train, test = self._images(240, 1, seed), self._images(60, 2, seed)
        return public, SensitiveData(*train, *test)

    def validation(self, seed: int) -> PublicSource:
        return PublicSource("public-validation", *self._images(100, 0, seed))

    def build(self, task: str, seed: int, shards: int, proxy: ProxySpec) -> Problem:
        return image_problem(self.name, task, seed=seed, shards=shards, proxy=proxy)


def _texts(prefix: str, count: int, users: int) -> TextSet:
    texts = tuple(f"{prefix} speech {i} says the quick brown fox jumps over the lazy dog {i % 7}" for i in range(count))
    return TextSet(texts, np.arange(count) % users, f"{prefix}-{count}")


PLAYS, NEWS = _texts("play", 40, 4), _texts("news", 40, 4)
PRIVATE, HELD_OUT = _texts("private", 48, 12), _texts("held-out", 16, 4)


@dataclass(frozen=True)
class MyTexts:
    """A user's text world: its documents by role (:class:`~dpaudit_mix.data.worlds.TextDocuments`)."""

    name: str = "outside-texts"
    tasks: tuple[str, ...] = (registry.TEXT_TASK,)
    source_sets: tuple[tuple[str, TextSet], ...] = (("plays", PLAYS), ("news", NEWS))
    sensitive: TextSet = PRIVATE
    test: TextSet | None = HELD_OUT
    validation: TextSet | None = None

    def build(self, task: str, seed: int, shards: int, proxy: ProxySpec) -> Problem:
        sources = [(name, texts.texts) for name, texts in self.source_sets]
        test = self.test or self.sensitive

        def arrays() -> dict[str, np.ndarray]:
            return text_arrays(sources, self.sensitive.texts, self.sensitive.users, test.texts, test.users)

        return text_problem(self.name, seed, arrays)


@pytest.fixture
def outside() -> Iterator[None]:
    dm.register_world("outside-images", MyImages())
    dm.register_world("outside-texts", MyTexts())
    yield
    worlds.WORLDS.unregister("outside-images")
    worlds.WORLDS.unregister("outside-texts")


def test_outside_worlds_are_known_by_their_capabilities(outside) -> None:
    assert registry.is_image(registry.world("outside-images")) and not registry.is_text("outside-images")
    assert registry.is_text("outside-texts") and not registry.is_image(registry.world("outside-texts"))
    public = registry.build_public("outside-images", "digit-3")  # the problem tuning rehearses on
    assert public.k == 3 and public.meta["split"] == "public validation"
    assert registry.build("outside-images", "digit-3").meta["sensitive_sha256"]  # its budget's key


def test_an_outside_image_world_runs_through_the_pipeline_with_tuning(outside, tmp_path: Path) -> None:
    spec = tmp_path / "mine.toml"
    spec.write_text(
        'world = "outside-images"\nepsilons = [2.0]\nseeds = 1\nmethods = ["dpmixmin", "uniform"]\n'
        "pretrain_examples = 200\npretrain_epochs = 1\nfinetune_epochs = 1\nmix_tuning = true\n"
    )
    assert main(["pipeline", str(spec), "--out", str(tmp_path / "out")]) == 0
    entries = json.loads((tmp_path / "out" / "mixtures.json").read_text())
    (private,) = [e for e in entries if e["method"] == "dpmixmin"]
    assert len(private["weights"]) == 3 and private["learner"]["public_n"] > 0  # tuned on its public problem


def test_an_outside_text_world_runs_through_the_text_pipeline(outside, tmp_path: Path) -> None:
    spec = tmp_path / "mine.toml"
    spec.write_text(
        'world = "outside-texts"\nepsilons = [2.0]\nseeds = 1\nmethods = ["dpmixmin", "uniform"]\n'
        "pretrain_windows = 100\npretrain_epochs = 1\nfinetune_steps = 2\nfinetune_users = 4\n"
        "windows_per_user = 2\nmix_steps = 20\n"
    )
    assert main(["pipeline", str(spec), "--out", str(tmp_path / "out")]) == 0
    entries = json.loads((tmp_path / "out" / "mixtures.json").read_text())
    assert {e["method"] for e in entries} == {"dpmixmin", "uniform"}
    assert all(len(e["weights"]) == 2 for e in entries if e["weights"] is not None)
