"""`dpaudit-mix problem NAME`: problems built from registered worlds (docs/concepts/pipeline.md).

Worlds are registered by name in :data:`.worlds.WORLDS` (:func:`register_world` adds a user's
own; the capabilities a world may offer are Protocols there); their problems are built and cached
by :mod:`.problems`. Here: names resolved (aliases, data manifests), the built-in worlds, and
``build`` / ``build_public``, which add what every problem carries (its sensitive set's identity).
The built-ins: ``mnist-labels`` (sources split by label; MixMin's premise fails there),
``mnist-shift`` (sources shifted by degrees; it holds), ``fashion-shift`` (mnist-shift's design on
Debian's Fashion-MNIST, at the paper's scale) and the text world ``shakespeare-users``.
The old name ``mnist`` is ``mnist-labels``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..base.errors import require
from ..base.identity import META_KEY, sensitive_sha256
from ..models import DEFAULT_NETWORK
from ..problem import Problem
from . import fashion
from .file_world import load_world, signature
from .manifest import is_manifest
from .ngram import text_arrays
from .problems import USER_SIZE, image_problem, image_sources, proxy_meta, text_problem, world_probabilities
from .proxies import LOGISTIC, TASKS, ProxySpec, task_log_likelihood
from .shift import graded_sources, public_validation, shift_world
from .sources import PublicSource, SensitiveData, mnist_world, public_shards, validation_slice
from .text import BBC_TOPICS, GENRES, SENSITIVE_GENRE, text_world
from .worlds import (
    ALIASES,
    DEFAULT_TASK,
    FASHION_WORLD,
    TEXT_TASK,
    TEXT_WORLD,
    WORLDS,
    ImageSources,
    TextDocuments,
    World,
    content_of,
    has_documents,
    identity_of,
    is_image,
    register_world,
    world_files,
)

__all__ = [
    "ALIASES",
    "DEFAULT_TASK",
    "FASHION_WORLD",
    "MAX_SHARDS",
    "PROBLEMS",
    "TEXT_SOURCES",
    "TEXT_TASK",
    "TEXT_WORLD",
    "USER_SIZE",
    "WORLDS",
    "ImageSources",
    "ImageWorld",
    "SensitiveSet",
    "TextDocuments",
    "TextWorld",
    "World",
    "build",
    "build_public",
    "canonical",
    "content",
    "identity",
    "image_problem",
    "image_world",
    "image_worlds",
    "is_image",
    "is_text",
    "max_sources",
    "problem_path",
    "proxy_meta",
    "proxy_spec",
    "register_data",
    "register_world",
    "sensitive_identity",
    "tasks",
    "text_problem",
    "world",
    "world_files",
    "world_probabilities",
    "world_sources",
    "world_validation",
]

#: the largest number of shard sources `build(..., shards=K)` offers for k-scaling.
MAX_SHARDS = 64


class _Problems:
    """Every name a spec's ``problem`` may give for a world: the registered ones and the aliases."""

    def __contains__(self, name: object) -> bool:
        """A registered world, an alias, or a data manifest's path (read, and checked, when resolved)."""
        return isinstance(name, str) and (name in ALIASES or name in WORLDS or is_manifest(name))

    def __iter__(self) -> Iterator[str]:
        return iter((*WORLDS.names(), *ALIASES))


PROBLEMS = _Problems()


#: each data manifest named so far (resolved path) → the files' signature when read, and the key
#: its world is registered under.
_DATA: dict[Path, tuple[tuple[tuple[str, int, int], ...], str]] = {}


def register_data(path: str | Path) -> str:
    """Register the world a data manifest names under ``data.<its content hash>``.

    It is read again only when the manifest or a file it names has changed since (size or
    modification time): naming it again in the same process costs a stat per file.

    Args:
      path: the data manifest (a TOML file naming the user's files).

    Returns:
      The key the world is registered under.

    Raises:
      InputError: a manifest or a file it names that is missing, malformed or too large."""
    resolved = Path(path).resolve()
    known = _DATA.get(resolved)
    if known is not None and signature(resolved, world_files(known[1])) == known[0]:
        return known[1]
    loaded = load_world(path, "")
    key = f"data.{loaded.content[:16]}"
    register_world(key, replace(loaded, name=key), replace=True)
    _DATA[resolved] = (loaded.signature, key)
    return key


def canonical(name: str) -> str:
    """The registered key of ``name``: a world's name, an alias's world, or a data manifest's world."""
    if isinstance(name, str) and is_manifest(name):
        return register_data(name)
    require(name in PROBLEMS, f"unknown problem {name!r}; available: {', '.join(PROBLEMS)}")
    return ALIASES.get(name, name)


def identity(name: str) -> str:
    """What streams, cache file names and reports call the world: its name (a file world's
    manifest ``name``), never a path or a hash."""
    return identity_of(canonical(name))


def content(name: str) -> str:
    """The sha256 of a file world's manifest and files ("" for an embedded world, whose cache
    keys hash the code that builds it)."""
    return content_of(canonical(name))


def world(name: str) -> World:
    return WORLDS.get(canonical(name))


def is_text(name: str) -> bool:
    """Whether ``name`` is the embedded text world or one offering its documents
    (:class:`.worlds.TextDocuments`: a text data manifest's, read if a manifest, or a user's)."""
    return isinstance(name, str) and name in PROBLEMS and (canonical(name) == TEXT_WORLD or has_documents(world(name)))


def image_worlds() -> tuple[str, ...]:
    """The image worlds a user names by name (a file world is named by its manifest's path, not
    by the ``data.<hash>`` key it is registered under, so messages leave those out)."""
    return tuple(n for n in WORLDS.names() if not n.startswith("data.") and is_image(WORLDS.get(n)))


def image_world(name: str) -> str:
    name = canonical(name)
    require(
        is_image(WORLDS.get(name)), f"{name} is no image world; this needs an image world ({', '.join(image_worlds())})"
    )
    return name


def proxy_spec(problem: str, kind: str, epochs: int | None, network: str = DEFAULT_NETWORK) -> ProxySpec:
    """The proxies asked for ``problem``: any kind on an image world; a problem file or a world
    without images has its proxies already (the logistic default is then the only answer)."""
    proxy = ProxySpec(kind, epochs, network)
    if proxy != LOGISTIC:
        require(
            problem in PROBLEMS and is_image(world(problem)),
            f"proxy = {kind!r} applies to the image worlds ({', '.join(image_worlds())}), not {problem!r}",
        )
    return proxy


def max_sources(name: str) -> int:
    """How many sources k-scaling can draw on (0: the world offers none beyond its own)."""
    return int(getattr(world(name), "max_sources", 0))


def problem_path(name: str) -> Path:
    """A spec's ``problem`` that is not an embedded name: the path of an existing problem file."""
    require(
        Path(name).is_file(),
        f"problem {name!r} is neither an embedded problem ({', '.join(PROBLEMS)}) nor an existing file",
    )
    return Path(name)


def world_sources(
    name: str, seed: int, shards: int = 0, synthetic: bool = False
) -> tuple[list[PublicSource], SensitiveData]:
    """The world's public sources (or, with ``shards`` = K > 0, its K k-scaling sources: class-skewed
    shards for mnist-labels, random compositions of graded shifts for mnist-shift); ``synthetic``
    adds EDM samples of the world's public validation slice as one more source."""
    sources, sensitive = image_sources(image_world(name)).sources(seed, shards)
    if synthetic:
        from .synthetic import synthetic_source  # torch-heavy; only when asked for

        sources = [*sources, synthetic_source(world_validation(name, seed), canonical(name), seed)]
    return sources, sensitive


def world_validation(name: str, seed: int) -> PublicSource:
    """The world's clean public validation slice (never private: free to choose hyper-parameters on)."""
    return image_sources(image_world(name)).validation(seed)


TEXT_SOURCES = (*(f"shakespeare-{g}" for g in GENRES if g != SENSITIVE_GENRE), *(f"bbc-{t}" for t in BBC_TOPICS))


def _text_problem(seed: int) -> dict[str, np.ndarray]:
    sources, train, test = text_world(seed)
    return text_arrays([(s.name, s.texts) for s in sources], train.texts, train.users, test.texts, test.users)


def build(
    name: str, task: str = DEFAULT_TASK, *, seed: int = 0, shards: int = 0, proxy: ProxySpec = LOGISTIC
) -> Problem:
    """The problem ``name`` for ``task``: logp on the sensitive train split, held-out on test.

    ``shards`` = K > 0 replaces the named sources by K k-scaling sources (an image world's
    class-skewed shards; the text world's own sources, of which k-scaling takes the first k).
    ``proxy`` chooses an image world's proxies (the text world's are its n-gram models).
    """
    name = canonical(name)
    chosen = world(name)
    require(task in chosen.tasks, f"unknown task {task!r} for {name}; available: {', '.join(chosen.tasks)}")
    require(
        proxy == LOGISTIC or is_image(chosen),
        f"{name} has its own proxies; proxy = {proxy.kind!r} is for image worlds",
    )
    offered = max_sources(name)
    require(0 <= shards <= offered, f"{name} offers at most {offered} k-scaling sources, asked for {shards}")
    built = chosen.build(task, seed, shards, proxy)
    require(isinstance(built, Problem), f"world {name!r} built {type(built).__name__}, not a Problem")
    data = sensitive_identity(name, seed, shards)
    if data is None:  # a world that does not show its sensitive set: the ledger keys its problems by their rows
        return built
    return replace(built, meta={**built.meta, META_KEY: data})


#: what a world's sensitive training set is: its examples (images or texts), labels (None for
#: texts) and users (None where the data has none).
SensitiveSet = tuple[np.ndarray | tuple[str, ...], np.ndarray | None, np.ndarray | None]


#: (world name, seed, shards) → (the world object it was computed for, its identity).
_IDENTITIES: dict[tuple[str, int, int], tuple[object, str | None]] = {}


def sensitive_identity(name: str, seed: int = 0, shards: int = 0) -> str | None:
    """The identity of the sensitive training set that ``name``'s problems are built on and its
    pipeline trains on (:func:`..identity.sensitive_sha256`): the key of its privacy budget, one
    for λ and model releases alike. A world offers it by a ``sensitive_set(seed, shards)``
    method, or, for an image world, by its ``sources``; None where it offers neither."""
    key = (canonical(name), seed, shards)
    chosen = world(name)
    known = _IDENTITIES.get(key)
    if known is not None and known[0] is chosen:  # the same world object: a world replaced is computed again
        return known[1]
    method = getattr(chosen, "sensitive_set", None)
    if callable(method):
        examples, labels, users = method(seed, shards)
        value: str | None = sensitive_sha256(examples, labels, users)
    elif is_image(chosen):
        _, sensitive = world_sources(name, seed, shards)
        value = sensitive_sha256(sensitive.train_images, sensitive.train_labels)
    else:
        value = None
    _IDENTITIES[key] = (chosen, value)
    return value


@dataclass(frozen=True)
class ImageWorld:
    """An embedded image world: its sources and validation slice, and proxies trained on them."""

    name: str
    tasks: tuple[str, ...] = TASKS
    max_sources: int = MAX_SHARDS

    def sources(self, seed: int, shards: int) -> tuple[list[PublicSource], SensitiveData]:
        if self.name == "mnist-labels":
            return public_shards(shards, seed) if shards else mnist_world(seed)
        if self.name == FASHION_WORLD:
            return fashion.fashion_world(seed)
        if shards:
            return graded_sources(shards, seed)
        sources, sensitive, _ = shift_world(seed)
        return sources, sensitive

    @property
    def content(self) -> str:
        """The sha256 of the files a world reads from outside this package (fashion-shift's
        Debian files), so that its caches never serve another copy's results; "" for the rest."""
        return fashion.digest() if self.name == FASHION_WORLD else ""

    def validation(self, seed: int) -> PublicSource:
        if self.name == FASHION_WORLD:
            return fashion.public_validation(seed)
        return validation_slice(seed) if self.name == "mnist-labels" else public_validation(seed)

    def build(self, task: str, seed: int, shards: int, proxy: ProxySpec) -> Problem:
        return image_problem(self.name, task, seed=seed, shards=shards, proxy=proxy)


@dataclass(frozen=True)
class TextWorld:
    """The embedded text world: Shakespeare's speakers, with 4-gram proxies of its own."""

    name: str = TEXT_WORLD
    tasks: tuple[str, ...] = (TEXT_TASK,)

    @property
    def max_sources(self) -> int:
        return len(TEXT_SOURCES)

    def build(self, task: str, seed: int, shards: int, proxy: ProxySpec) -> Problem:
        return text_problem(self.name, seed, lambda: _text_problem(seed))

    def sensitive_set(self, seed: int, shards: int) -> SensitiveSet:
        """The training speeches and their speakers (the test speakers' are held out)."""
        _, train, _ = text_world(seed)
        return train.texts, None, train.users


def build_public(
    name: str, task: str = DEFAULT_TASK, *, seed: int = 0, shards: int = 0, proxy: ProxySpec = LOGISTIC
) -> Problem:
    """The same proxies on the world's public validation slice: a problem that mirrors the
    sensitive one and costs no privacy, for choosing the learner's settings."""
    name = image_world(name)
    require(task in TASKS, f"unknown task {task!r} for {name}; available: {', '.join(TASKS)}")
    names, *_, public, public_y, epochs = world_probabilities(name, seed, shards, proxy)
    return Problem(
        task_log_likelihood(public, public_y, task),
        names,
        task=task,
        meta={
            "name": identity(name),
            "seed": str(seed),
            "split": "public validation",
            **proxy_meta(proxy, public, public_y, epochs),
        },
    )


def tasks(name: str) -> tuple[str, ...]:
    return world(name).tasks


for _name in ("mnist-labels", "mnist-shift"):
    register_world(_name, ImageWorld(_name))
register_world(FASHION_WORLD, ImageWorld(FASHION_WORLD, max_sources=0))  # needs Debian's files (fashion.py)
register_world(TEXT_WORLD, TextWorld())
