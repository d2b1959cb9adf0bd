"""`dpaudit-mix problem NAME`: problems built from registered worlds (DESIGN §8–9).

A world is a sensitive set and its public sources, registered by name in :data:`WORLDS` (a
:class:`~..registry.Registry`; :func:`register_world` adds a user's own). It has ``tasks`` and
``build(task, seed, shards, proxy) -> Problem``; an *image* world also has ``sources(seed,
shards)`` and ``validation(seed)`` (the pipeline pretrains on its images) and may take any proxy.
The built-ins: ``mnist-labels`` (sources split by label; MixMin's premise fails there),
``mnist-shift`` (sources shifted by degrees; it holds), ``fashion-shift`` (mnist-shift's design on
Debian's Fashion-MNIST, at the paper's scale) and the text world ``shakespeare-users``.
The old name ``mnist`` is ``mnist-labels``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import numpy as np

from ..atomic import write_npz
from ..cache import cached, json_sha256, load_npz, save_npz, user_cache_dir
from ..errors import require
from ..identity import META_KEY, sensitive_sha256
from ..models import DEFAULT_NETWORK
from ..problem import Problem
from ..randomness import Key, stream
from ..registry import Registry
from ..threads import one_thread
from . import fashion
from .file_world import FileImageWorld, FileTextWorld
from .manifest import is_manifest
from .ngram import text_arrays
from .proxies import (
    LOGISTIC,
    TASKS,
    ProxySpec,
    accuracies,
    probabilities,
    task_log_likelihood,
    train_proxies,
)
from .shift import graded_sources, public_validation, shift_world
from .sources import PublicSource, SensitiveData, mnist_world, public_shards, validation_slice
from .text import BBC_TOPICS, GENRES, SENSITIVE_GENRE, text_world

TEXT_WORLD = "shakespeare-users"
FASHION_WORLD = "fashion-shift"
TEXT_TASK = "lm"  # one task: each speech's mean per-character log-likelihood
ALIASES = {"mnist": "mnist-labels"}
DEFAULT_TASK = "digit-0"
#: examples per synthetic user: MNIST has no writer ids here, so users are seeded groups.
USER_SIZE = 3


#: the largest number of shard sources `build(..., shards=K)` offers for k-scaling.
MAX_SHARDS = 64


#: source names, then (class probabilities, labels) on the sensitive train split, the sensitive
#: test split and the public validation slice, then each proxy's training epochs (0: logistic).
Probabilities = tuple[
    tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray
]
PARTS = ("train", "train_y", "test", "test_y", "public", "public_y", "epochs")
T = TypeVar("T")


class World(Protocol):
    """A data source problems are built from: its tasks, and a problem for each (``shards`` > 0:
    that many k-scaling sources, up to ``max_sources``; ``proxy``: the proxies, for a world that
    trains them)."""

    @property
    def tasks(self) -> tuple[str, ...]: ...

    def build(self, task: str, seed: int, shards: int, proxy: ProxySpec) -> Problem: ...


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
    """Make ``world`` a problem every spec and ``dpaudit-mix problem`` accept by ``name``."""
    return WORLDS.register(name, world, replace=replace)


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
    """Register the world a data manifest names under ``data.<its content hash>``; returns that
    key. It is read again only when the manifest or a file it names has changed since (size or
    modification time): naming it again in the same process costs a stat per file."""
    from .file_world import load_world, signature

    resolved = Path(path).resolve()
    known = _DATA.get(resolved)
    if known is not None and signature(resolved, world_files(known[1])) == known[0]:
        return known[1]
    loaded = load_world(path, "")
    key = f"data.{loaded.content[:16]}"
    register_world(key, replace(loaded, name=key), replace=True)
    _DATA[resolved] = (loaded.signature, key)
    return key


def world_files(key: str) -> tuple[Path, ...]:
    return tuple(getattr(WORLDS.get(key), "files", ()))


def canonical(name: str) -> str:
    """The registered key of ``name``: a world's name, an alias's world, or a data manifest's world."""
    if isinstance(name, str) and is_manifest(name):
        return register_data(name)
    require(name in PROBLEMS, f"unknown problem {name!r}; available: {', '.join(PROBLEMS)}")
    return ALIASES.get(name, name)


def identity(name: str) -> str:
    """What streams, cache file names and reports call the world: its name (a file world's
    manifest ``name``), never a path or a hash."""
    return str(getattr(world(name), "identity", canonical(name)))


def content(name: str) -> str:
    """The sha256 of a file world's manifest and files ("" for an embedded world, whose cache
    keys hash the code that builds it)."""
    return str(getattr(world(name), "content", ""))


def world(name: str) -> World:
    return WORLDS.get(canonical(name))


def is_text(name: str) -> bool:
    """Whether ``name`` is the embedded text world or a text data manifest's (read if a manifest)."""
    return isinstance(name, str) and name in PROBLEMS and isinstance(world(name), (TextWorld, FileTextWorld))


def is_image(world: World) -> bool:
    """Whether ``world`` has images to pretrain on (``sources`` and ``validation``)."""
    return callable(getattr(world, "sources", None)) and callable(getattr(world, "validation", None))


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
    sources, sensitive = cast(ImageWorld, world(image_world(name))).sources(seed, shards)
    if synthetic:
        from .synthetic import synthetic_source  # torch-heavy; only when asked for

        sources = [*sources, synthetic_source(world_validation(name, seed), canonical(name), seed)]
    return sources, sensitive


def world_validation(name: str, seed: int) -> PublicSource:
    """The world's clean public validation slice (never private: free to choose hyper-parameters on)."""
    return cast(ImageWorld, world(image_world(name))).validation(seed)


def _compute_probabilities(name: str, seed: int, shards: int, proxy: ProxySpec) -> Probabilities:
    sources, sensitive = world_sources(name, seed, shards)
    public = world_validation(name, seed)
    proxies = train_proxies(sources, proxy, public, Key(seed).child(proxies=identity(name), shards=shards))
    parts = [
        (sensitive.train_images, sensitive.train_labels),
        (sensitive.test_images, sensitive.test_labels),
        (public.images, public.labels),
    ]
    arrays = [a for images, labels in parts for a in (probabilities(proxies, images), labels)]
    epochs = np.array([p.epochs or 0 for p in proxies], dtype=np.int64)
    return (tuple(s.name for s in sources), *arrays, epochs)  # type: ignore[return-value]  # the cache file's parts


def _cache_key(name: str, seed: int, shards: int, proxy: ProxySpec = LOGISTIC) -> str:
    """What the probabilities depend on: the arguments, the code that builds them and the data
    it reads (this package's data modules; the CNN's module for network proxies), and the
    numeric libraries that train the proxies."""
    import sklearn

    versions = {"numpy": np.__version__, "sklearn": sklearn.__version__}
    modules = sorted(Path(__file__).parent.glob("*.py"))
    if proxy.kind == "cnn":
        import torch

        versions["torch"] = torch.__version__
        modules.append(Path(__file__).parent.parent / "models" / "cnn.py")
    data = content(name) if name in WORLDS else ""
    world_id = {"world": identity(name), "content": data} if data else {"world": name}
    digest = json_sha256({**world_id, "seed": seed, "shards": shards, **proxy.ids, **versions})
    for module in modules:
        digest.update(module.read_bytes())
    return digest.hexdigest()[:24]


def _save(path: Path, value: Probabilities) -> None:
    write_npz(path, names=np.array(value[0], dtype=str), **dict(zip(PARTS, value[1:], strict=True)))


def _load(path: Path) -> Probabilities:
    arrays = load_npz(path)
    return cast(Probabilities, (tuple(str(n) for n in arrays["names"]), *(arrays[part] for part in PARTS)))


def on_one_thread(compute: Callable[..., T], *args: Any, torch: bool = False) -> Callable[[], T]:
    """``compute(*args)`` on one thread (:func:`..threads.one_thread`; ``torch``: a CNN proxy
    trains): a problem's bytes are cached, released and compared by digest (``check-release``
    rebuilds an embedded problem), so they must not follow the machine's core count."""

    def pinned() -> T:
        with one_thread(torch=torch):
            return compute(*args)

    return pinned


@lru_cache(maxsize=4)
def world_probabilities(name: str, seed: int, shards: int = 0, proxy: ProxySpec = LOGISTIC) -> Probabilities:
    """Every proxy's class probabilities on the sensitive splits: training the proxies is most of
    the cost of a problem, so the result is cached on disk (:func:`..cache.user_cache_dir`), under
    a key that names the proxies."""
    name = canonical(name)
    path = user_cache_dir() / "problems" / f"{identity(name)}-{_cache_key(name, seed, shards, proxy)}.npz"
    compute = on_one_thread(_compute_probabilities, name, seed, shards, proxy, torch=proxy.kind == "cnn")
    return cached(path, compute, _save, _load)


def proxy_meta(proxy: ProxySpec, public: np.ndarray, public_y: np.ndarray, epochs: np.ndarray) -> dict[str, str]:
    """What a built problem says about its proxies: their kind, each one's accuracy on the public
    validation slice (the slice a CNN's early stopping watched), and a CNN's epochs."""
    meta = {
        "proxy": proxy.label,
        "proxy_validation_accuracy": ",".join(f"{a:.4f}" for a in accuracies(public, public_y)),
    }
    if proxy.kind == "cnn":
        meta["proxy_epochs"] = ",".join(str(int(e)) for e in epochs)
    return meta


TEXT_SOURCES = (*(f"shakespeare-{g}" for g in GENRES if g != SENSITIVE_GENRE), *(f"bbc-{t}" for t in BBC_TOPICS))


def _text_problem(seed: int) -> dict[str, np.ndarray]:
    sources, train, test = text_world(seed)
    return text_arrays([(s.name, s.texts) for s in sources], train.texts, train.users, test.texts, test.users)


def text_problem(name: str, seed: int, compute: Callable[[], dict[str, np.ndarray]]) -> Problem:
    """A text world's problem: its arrays cached on disk under its identity and content; users are
    the documents' users (speakers), held-out rows the test users' documents."""
    path = user_cache_dir() / "problems" / f"{identity(name)}-{_cache_key(name, seed, 0)}.npz"
    arrays = cached(path, on_one_thread(compute), save_npz, load_npz)
    return Problem(
        arrays["logp"],
        tuple(str(n) for n in arrays["names"]),
        users=arrays["users"],
        heldout_logp=arrays.get("heldout_logp"),
        task=TEXT_TASK,
        meta={"name": identity(name), "seed": str(seed)},
        heldout_users=arrays.get("test_users"),
    )


def build(name: str, task: str = DEFAULT_TASK, seed: int = 0, shards: int = 0, proxy: ProxySpec = LOGISTIC) -> Problem:
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
        return image_problem(self.name, task, seed, shards, proxy)


def image_problem(
    name: str, task: str, seed: int, shards: int, proxy: ProxySpec, users: np.ndarray | None = None
) -> Problem:
    """An image world's problem for ``task``: its proxies' log-likelihoods on the sensitive train
    split (held out: on the test split, when it has one); ``users`` per row, else seeded groups
    of USER_SIZE (MNIST has no writer ids)."""
    names, train, train_y, test, test_y, public, public_y, epochs = world_probabilities(name, seed, shards, proxy)
    n = len(train_y)
    if users is None:
        users = stream(seed, "problem-users", world=identity(name)).numpy().permutation(n) // USER_SIZE
    return Problem(
        logp=task_log_likelihood(train, train_y, task),
        sources=names,
        users=users.astype(np.int64),
        heldout_logp=task_log_likelihood(test, test_y, task) if len(test_y) else None,
        task=task,
        meta={"name": identity(name), "seed": str(seed), **proxy_meta(proxy, public, public_y, epochs)},
    )


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
    name: str, task: str = DEFAULT_TASK, seed: int = 0, shards: int = 0, proxy: ProxySpec = LOGISTIC
) -> Problem:
    """The same proxies on the world's public validation slice: a problem that mirrors the
    sensitive one and costs no privacy, for choosing the learner's settings."""
    name = image_world(name)
    require(task in TASKS, f"unknown task {task!r} for {name}; available: {', '.join(TASKS)}")
    require(
        isinstance(world(name), (ImageWorld, FileImageWorld)),
        f"{name} has no proxies of this package's to mirror on public data",
    )
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
