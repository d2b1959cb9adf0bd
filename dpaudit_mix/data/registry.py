"""`dpaudit-mix problem NAME`: problem files built from the embedded worlds (DESIGN §8–9).

A world is a sensitive set and its public sources: ``mnist-labels`` (sources split by label;
MixMin's premise fails there) and ``mnist-shift`` (sources shifted by degrees; it holds). The
old name ``mnist`` is ``mnist-labels``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import cast

import numpy as np

from ..atomic import write_npz
from ..cache import cached, json_sha256, load_npz, save_npz, user_cache_dir
from ..errors import require
from ..problem import Problem
from ..randomness import Key, stream
from .ngram import CharNGram
from .proxies import LOGISTIC, TASKS, ProxySpec, accuracies, probabilities, task_log_likelihood, train_proxies
from .shift import graded_sources, public_validation, shift_world
from .sources import PublicSource, SensitiveData, mnist_world, public_shards, validation_slice
from .text import BBC_TOPICS, GENRES, SENSITIVE_GENRE, text_world

IMAGE_WORLDS = ("mnist-labels", "mnist-shift")
TEXT_WORLD = "shakespeare-users"
TEXT_TASK = "lm"  # one task: each speech's mean per-character log-likelihood
WORLDS = (*IMAGE_WORLDS, TEXT_WORLD)
ALIASES = {"mnist": "mnist-labels"}
PROBLEMS = (*WORLDS, *ALIASES)
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


def canonical(name: str) -> str:
    require(name in PROBLEMS, f"unknown problem {name!r}; available: {', '.join(PROBLEMS)}")
    return ALIASES.get(name, name)


def image_world(name: str) -> str:
    name = canonical(name)
    require(name in IMAGE_WORLDS, f"{name} is a text world; this needs an image world ({', '.join(IMAGE_WORLDS)})")
    return name


def proxy_spec(problem: str, kind: str, epochs: int | None) -> ProxySpec:
    """The proxies asked for ``problem``: any kind on an embedded image world; a problem file or
    the text world has its proxies already (the logistic default is then the only answer)."""
    proxy = ProxySpec(kind, epochs)
    if proxy != LOGISTIC:
        require(
            problem in PROBLEMS and canonical(problem) in IMAGE_WORLDS,
            f"proxy = {kind!r} applies to the embedded image worlds ({', '.join(IMAGE_WORLDS)}), not {problem!r}",
        )
    return proxy


def max_sources(name: str) -> int:
    """How many sources k-scaling can draw on: shards for image worlds, the text world's own."""
    return len(TEXT_SOURCES) if canonical(name) == TEXT_WORLD else MAX_SHARDS


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
    if image_world(name) == "mnist-labels":
        sources, sensitive = public_shards(shards, seed) if shards else mnist_world(seed)
    elif shards:
        sources, sensitive = graded_sources(shards, seed)
    else:
        sources, sensitive, _ = shift_world(seed)
    if synthetic:
        from .synthetic import synthetic_source  # torch-heavy; only when asked for

        sources = [*sources, synthetic_source(world_validation(name, seed), canonical(name), seed)]
    return sources, sensitive


def world_validation(name: str, seed: int) -> PublicSource:
    """The world's clean public validation slice (never private: free to choose hyper-parameters on)."""
    if image_world(name) == "mnist-labels":
        return validation_slice(seed)
    return public_validation(seed)


def _compute_probabilities(name: str, seed: int, shards: int, proxy: ProxySpec) -> Probabilities:
    sources, sensitive = world_sources(name, seed, shards)
    public = world_validation(name, seed)
    proxies = train_proxies(sources, proxy, public, Key(seed).child(proxies=name, shards=shards))
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
    digest = json_sha256({"world": name, "seed": seed, "shards": shards, **proxy.ids, **versions})
    for module in modules:
        digest.update(module.read_bytes())
    return digest.hexdigest()[:24]


def _save(path: Path, value: Probabilities) -> None:
    write_npz(path, names=np.array(value[0], dtype=str), **dict(zip(PARTS, value[1:], strict=True)))


def _load(path: Path) -> Probabilities:
    arrays = load_npz(path)
    return cast(Probabilities, (tuple(str(n) for n in arrays["names"]), *(arrays[part] for part in PARTS)))


@lru_cache(maxsize=4)
def world_probabilities(name: str, seed: int, shards: int = 0, proxy: ProxySpec = LOGISTIC) -> Probabilities:
    """Every proxy's class probabilities on the sensitive splits: training the proxies is most of
    the cost of a problem, so the result is cached on disk (:func:`..cache.user_cache_dir`), under
    a key that names the proxies."""
    name = canonical(name)
    path = user_cache_dir() / "problems" / f"{name}-{_cache_key(name, seed, shards, proxy)}.npz"
    return cached(path, lambda: _compute_probabilities(name, seed, shards, proxy), _save, _load)


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
    models = [CharNGram.fit(list(s.texts)) for s in sources]
    return {
        "names": np.array([s.name for s in sources]),
        "users": train.users,
        "test_users": test.users,
        "logp": np.stack([m.mean_log_likelihood(list(train.texts)) for m in models], axis=1),
        "heldout_logp": np.stack([m.mean_log_likelihood(list(test.texts)) for m in models], axis=1),
    }


def _build_text(seed: int) -> Problem:
    """logp[j, i]: speech j's mean per-character log-likelihood under source i's 4-gram model;
    users are speakers; held-out rows are the speeches of the test speakers."""
    arrays = cached(
        user_cache_dir() / "problems" / f"{TEXT_WORLD}-{_cache_key(TEXT_WORLD, seed, 0)}.npz",
        lambda: _text_problem(seed),
        save_npz,
        load_npz,
    )
    return Problem(
        arrays["logp"],
        tuple(str(n) for n in arrays["names"]),
        users=arrays["users"],
        heldout_logp=arrays["heldout_logp"],
        task=TEXT_TASK,
        meta={"name": TEXT_WORLD, "seed": str(seed)},
        heldout_users=arrays["test_users"],
    )


def build(name: str, task: str = DEFAULT_TASK, seed: int = 0, shards: int = 0, proxy: ProxySpec = LOGISTIC) -> Problem:
    """The problem ``name`` for ``task``: logp on the sensitive train split, held-out on test.

    ``shards`` = K > 0 replaces the named sources by K class-skewed shards of the public pool
    (image worlds); the text world offers its own sources, of which k-scaling takes the first k.
    ``proxy`` chooses the image worlds' proxies (the text world's are its n-gram models).
    """
    name = canonical(name)
    require(task in tasks(name), f"unknown task {task!r} for {name}; available: {', '.join(tasks(name))}")
    if name == TEXT_WORLD:
        require(proxy == LOGISTIC, f"{name} has its own n-gram proxies; proxy = {proxy.kind!r} is for image worlds")
        require(0 <= shards <= len(TEXT_SOURCES), f"{name} offers {len(TEXT_SOURCES)} sources, asked for {shards}")
        return _build_text(seed)
    require(0 <= shards <= MAX_SHARDS, f"{name} offers at most {MAX_SHARDS} shard sources, asked for {shards}")
    names, train, train_y, test, test_y, public, public_y, epochs = world_probabilities(name, seed, shards, proxy)
    n = len(train_y)
    users = stream(seed, "problem-users", world=name).numpy().permutation(n) // USER_SIZE
    return Problem(
        logp=task_log_likelihood(train, train_y, task),
        sources=names,
        users=users.astype(np.int64),
        heldout_logp=task_log_likelihood(test, test_y, task),
        task=task,
        meta={"name": name, "seed": str(seed), **proxy_meta(proxy, public, public_y, epochs)},
    )


def build_public(
    name: str, task: str = DEFAULT_TASK, seed: int = 0, shards: int = 0, proxy: ProxySpec = LOGISTIC
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
            "name": name,
            "seed": str(seed),
            "split": "public validation",
            **proxy_meta(proxy, public, public_y, epochs),
        },
    )


def tasks(name: str) -> tuple[str, ...]:
    return (TEXT_TASK,) if canonical(name) == TEXT_WORLD else TASKS
