"""Worlds from a user's files (a :mod:`.manifest`): registered like the embedded worlds, so every
command and spec that takes a world name takes a manifest's path too.

A file world is read once, when first named: every file is parsed from the bytes that were
hashed, and ``content`` (the sha256 of the manifest and of every file, in order) keys its
cached problems and stages, so that changed files are never served from a stale cache. Its
``identity`` (the manifest's ``name``) is what streams and reports name, as an embedded world's
name is: an embedded world exported to files (:mod:`.export`) and named as itself draws the
same randomness and so reproduces the embedded results.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..base.errors import require
from ..base.randomness import world_layout
from ..problem import Problem
from .image_files import SIZE, ImageSet, read_images
from .manifest import DataManifest, load_manifest
from .ngram import text_arrays
from .problems import image_problem, text_problem
from .proxies import TASKS, ProxySpec
from .sources import PublicSource, SensitiveData
from .text_files import TextSet, read_texts

#: images in a validation slice drawn from the sources when the manifest names none.
VALIDATION_SIZE = 500


def signature(manifest: Path, files: tuple[Path, ...]) -> tuple[tuple[str, int, int], ...]:
    """(path, size, mtime) of the manifest and of every file it names (a folder's files too):
    what tells a world read before from one whose files have changed since."""
    paths = [manifest]
    for path in files:
        paths += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    stats = []
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            return ()  # a file gone: read again (and say so then)
        stats.append((str(path), info.st_size, info.st_mtime_ns))
    return tuple(stats)


def _content(manifest: DataManifest, digests: list[tuple[str, str]]) -> str:
    digest = hashlib.sha256(manifest.content)
    for part, value in digests:
        digest.update(f"\0{part}\0{value}".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class FileImageWorld:
    """An image world from files: its sources, sensitive splits and validation slice, in memory."""

    name: str  # the registry's key for it
    identity: str
    content: str
    source_sets: tuple[PublicSource, ...]
    sensitive: ImageSet
    test: ImageSet | None
    given_validation: PublicSource | None
    tasks: tuple[str, ...] = TASKS
    max_sources: int = 0
    path: Path = field(default=Path())
    files: tuple[Path, ...] = ()
    signature: tuple[tuple[str, int, int], ...] = ()

    def sources(self, seed: int, shards: int) -> tuple[list[PublicSource], SensitiveData]:
        require(shards == 0, f"{self.path}: a file world has no k-scaling shards")
        empty = np.zeros((0, SIZE, SIZE), dtype=np.float32)
        test = self.test
        return list(self.source_sets), SensitiveData(
            self.sensitive.images,
            self.sensitive.labels,
            empty if test is None else test.images,
            np.zeros(0, dtype=np.int64) if test is None else test.labels,
        )

    def validation(self, seed: int) -> PublicSource:
        """The manifest's validation set, else VALIDATION_SIZE images drawn from the pooled sources
        (public: choosing on them spends no privacy; they are also in the sources)."""
        if self.given_validation is not None:
            return self.given_validation
        images = np.concatenate([s.images for s in self.source_sets])
        labels = np.concatenate([s.labels for s in self.source_sets])
        pick = world_layout(seed, "validation-slice").choice(
            len(labels), min(VALIDATION_SIZE, len(labels)), replace=False
        )
        return PublicSource("public-validation", images[pick], labels[pick])

    def build(self, task: str, seed: int, shards: int, proxy: ProxySpec) -> Problem:
        return image_problem(self.name, task, seed=seed, shards=shards, proxy=proxy, users=self.sensitive.users)

    def sensitive_set(self, seed: int, shards: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The sensitive file's images, labels and users: what the budget of this world belongs to."""
        return self.sensitive.images, self.sensitive.labels, self.sensitive.users


@dataclass(frozen=True)
class FileTextWorld:
    """A text world from files: 4-gram proxies per source, the sensitive documents' users."""

    name: str
    identity: str
    content: str
    source_sets: tuple[tuple[str, TextSet], ...]
    sensitive: TextSet
    test: TextSet | None
    validation: TextSet | None = None  # public, in-distribution documents with users: rehearsals train here
    tasks: tuple[str, ...] = ("lm",)
    files: tuple[Path, ...] = ()
    signature: tuple[tuple[str, int, int], ...] = ()

    @property
    def max_sources(self) -> int:
        return len(self.source_sets)

    def build(self, task: str, seed: int, shards: int, proxy: ProxySpec) -> Problem:
        return text_problem(self.name, seed, self.arrays)

    def sensitive_set(self, seed: int, shards: int) -> tuple[tuple[str, ...], None, np.ndarray | None]:
        """The sensitive documents and their users: what the budget of this world belongs to."""
        return self.sensitive.texts, None, self.sensitive.users

    def arrays(self) -> dict[str, np.ndarray]:
        """The 4-gram arrays; a sensitive document without a user is its own user."""
        train, test = self.sensitive, self.test
        return text_arrays(
            [(name, texts.texts) for name, texts in self.source_sets],
            train.texts,
            np.arange(len(train.texts)) if train.users is None else train.users,
            None if test is None else test.texts,
            None if test is None else (np.arange(len(test.texts)) if test.users is None else test.users),
        )


def load_world(path: str | Path, key: str) -> FileImageWorld | FileTextWorld:
    """The world a manifest names, every file read once and checked (one InputError per fault)."""
    manifest = load_manifest(path)
    files = tuple(
        p
        for p in (manifest.sensitive, manifest.sensitive_test, manifest.validation, *(f for _, f in manifest.sources))
        if p
    )
    stamp = signature(manifest.path, files)  # before reading: a change while reading is caught next time
    digests: list[tuple[str, str]] = []
    if manifest.kind == "text":
        sensitive = read_texts(manifest.sensitive, users_allowed=True)
        test = None if manifest.sensitive_test is None else read_texts(manifest.sensitive_test, users_allowed=True)
        public = None if manifest.validation is None else read_texts(manifest.validation, users_allowed=True)
        sources = tuple((name, read_texts(file)) for name, file in manifest.sources)
        digests = [("sensitive", sensitive.digest), ("test", test.digest if test else "")]
        digests += [("validation", public.digest)] if public else []  # absent: the content stays as before
        digests += [(f"source {name}", texts.digest) for name, texts in sources]
        content = _content(manifest, digests)
        return FileTextWorld(
            key, manifest.name, content, sources, sensitive, test, public, files=files, signature=stamp
        )
    classes = manifest.classes
    sensitive_images = read_images(manifest.sensitive, classes, users_allowed=True)
    test_images = None if manifest.sensitive_test is None else read_images(manifest.sensitive_test, classes)
    sets = [(name, read_images(file, classes, source=True)) for name, file in manifest.sources]
    validation = None if manifest.validation is None else read_images(manifest.validation, classes)
    digests = [("sensitive", sensitive_images.digest), ("test", test_images.digest if test_images else "")]
    digests += [("validation", validation.digest if validation else "")]
    digests += [(f"source {name}", s.digest) for name, s in sets]
    return FileImageWorld(
        key,
        manifest.name,
        _content(manifest, digests),
        tuple(PublicSource(name, s.images, s.labels) for name, s in sets),
        sensitive_images,
        test_images,
        None if validation is None else PublicSource("public-validation", validation.images, validation.labels),
        tasks=(*TASKS[:classes], "multiclass"),
        path=manifest.path,
        files=files,
        signature=stamp,
    )
