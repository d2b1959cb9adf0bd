"""Worlds by name (docs/concepts/pipeline.md): the registry every spec, command and call resolves a world in,
and the capabilities a world may offer, as Protocols (never a class a world must derive from).

A world is a sensitive set and its public sources, registered in :data:`WORLDS` (a
:class:`~..registry.Registry`; :func:`register_world` adds a user's own). It has ``tasks`` and
``build(task, seed, shards, proxy) -> Problem``. An :class:`ImageSources` world also offers its
images (the pipeline pretrains on them, this package trains its proxies on them, and its public
problem mirrors the sensitive one); a :class:`TextDocuments` world offers its documents (the
text pipeline trains on them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..base.errors import require
from ..base.registry import Registry
from ..problem import Problem
from .proxies import ProxySpec
from .sources import PublicSource, SensitiveData
from .text_files import TextSet

TEXT_WORLD = "shakespeare-users"
FASHION_WORLD = "fashion-shift"
TEXT_TASK = "lm"  # one task: each speech's mean per-character log-likelihood
ALIASES = {"mnist": "mnist-labels"}
DEFAULT_TASK = "digit-0"


class World(Protocol):
    """A data source problems are built from: its tasks, and a problem for each (``shards`` > 0:
    that many k-scaling sources, up to ``max_sources``; ``proxy``: the proxies, for a world that
    trains them)."""

    @property
    def tasks(self) -> tuple[str, ...]: ...

    def build(self, task: str, seed: int, shards: int, proxy: ProxySpec) -> Problem: ...


@runtime_checkable
class ImageSources(Protocol):
    """An image world: its public sources and sensitive splits (``shards`` > 0: that many
    k-scaling sources), and a public validation slice to choose settings on."""

    def sources(self, seed: int, shards: int) -> tuple[list[PublicSource], SensitiveData]: ...

    def validation(self, seed: int) -> PublicSource: ...


@runtime_checkable
class TextDocuments(Protocol):
    """A text world the text pipeline trains on: its public sources' documents, the sensitive
    documents (with users), the held-out users' documents, and public in-distribution documents
    with users (rehearsals train there; None: the world has none)."""

    source_sets: tuple[tuple[str, TextSet], ...]
    sensitive: TextSet
    test: TextSet | None
    validation: TextSet | None


def _check_world(name: str, obj: Any) -> None:
    tasks = getattr(obj, "tasks", None)
    require(
        isinstance(tasks, tuple) and len(tasks) >= 1 and all(isinstance(t, str) and t for t in tasks),
        f"world {name!r} needs tasks, a non-empty tuple of names",
    )
    require(callable(getattr(obj, "build", None)), f"world {name!r} needs a build(task, seed, shards, proxy) method")
    require(name not in ALIASES, f"{name!r} is an alias of {ALIASES.get(name)!r}")


#: every world a spec, a command or a call may name (besides the aliases in ALIASES).
WORLDS: Registry[World] = Registry("world", "worlds", _check_world)


def register_world(name: str, world: World, *, replace: bool = False) -> World:
    """Make ``world`` a problem every spec and ``dpaudit-mix problem`` accept by ``name``.

    Args:
      name: the name a spec's ``problem`` or ``world`` gives.
      world: a world (its capabilities offered by the Protocols of this module).
      replace: whether it may replace a world already registered under ``name``.

    Returns:
      ``world``.

    Raises:
      InputError: a bad name or a name taken (without ``replace``).
    """
    return WORLDS.register(name, world, replace=replace)


def registered(name: str) -> str:
    """The key of a registered world or an alias's (a manifest's path is resolved above, by
    :func:`.registry.canonical`)."""
    key = ALIASES.get(name, name)
    WORLDS.get(key)
    return key


def is_image(world: object) -> bool:
    """Whether ``world`` has images to pretrain on (:class:`ImageSources`: both methods)."""
    return callable(getattr(world, "sources", None)) and callable(getattr(world, "validation", None))


def has_documents(world: object) -> bool:
    """Whether ``world`` offers its documents (:class:`TextDocuments`); an image world's
    ``validation`` is a method, a text world's the documents themselves."""
    return isinstance(world, TextDocuments) and not is_image(world)


def world_files(key: str) -> tuple[Path, ...]:
    return tuple(getattr(WORLDS.get(key), "files", ()))


def identity_of(key: str) -> str:
    """What streams, cache file names and reports call a registered world: its name (a file
    world's manifest ``name``), never a path or a hash."""
    return str(getattr(WORLDS.get(key), "identity", key))


def content_of(key: str) -> str:
    """The sha256 of a file world's manifest and files ("" for an embedded world, whose cache
    keys hash the code that builds it)."""
    return str(getattr(WORLDS.get(key), "content", ""))
