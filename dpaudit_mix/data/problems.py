"""Problems of registered worlds: every image proxy's class probabilities on a world's splits,
trained once and cached on disk under a key naming the code, the data and the libraries, and the
problem of a task built from them; the text worlds' 4-gram arrays, cached the same way.
Everything here takes a registered key (:func:`.worlds.registered`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from ..base.atomic import write_npz
from ..base.cache import cached, json_sha256, load_npz, save_npz, user_cache_dir
from ..base.errors import require
from ..base.randomness import Key, stream
from ..base.threads import one_thread
from ..problem import Problem
from .proxies import LOGISTIC, ProxySpec, accuracies, probabilities, task_log_likelihood, train_proxies
from .sources import PublicSource, SensitiveData
from .worlds import TEXT_TASK, WORLDS, ImageSources, content_of, identity_of, registered

#: examples per synthetic user: MNIST has no writer ids here, so users are seeded groups.
USER_SIZE = 3

#: source names, then (class probabilities, labels) on the sensitive train split, the sensitive
#: test split and the public validation slice, then each proxy's training epochs (0: logistic).
Probabilities = tuple[
    tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray
]
PARTS = ("train", "train_y", "test", "test_y", "public", "public_y", "epochs")
T = TypeVar("T")


def image_sources(key: str) -> ImageSources:
    """The registered world ``key`` as an image world (an InputError when it offers no images)."""
    world = WORLDS.get(key)
    require(isinstance(world, ImageSources), f"{key} is no image world")
    return cast(ImageSources, world)


def image_sets(key: str, seed: int, shards: int) -> tuple[list[PublicSource], SensitiveData]:
    return image_sources(key).sources(seed, shards)


def _compute_probabilities(name: str, seed: int, shards: int, proxy: ProxySpec) -> Probabilities:
    sources, sensitive = image_sets(name, seed, shards)
    public = image_sources(name).validation(seed)
    proxies = train_proxies(sources, proxy, public, Key(seed).child(proxies=identity_of(name), shards=shards))
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
    data = content_of(name) if name in WORLDS else ""
    world_id = {"world": identity_of(name), "content": data} if data else {"world": name}
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
    name = registered(name)
    path = user_cache_dir() / "problems" / f"{identity_of(name)}-{_cache_key(name, seed, shards, proxy)}.npz"
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


def text_problem(name: str, seed: int, compute: Callable[[], dict[str, np.ndarray]]) -> Problem:
    """A text world's problem: its arrays cached on disk under its identity and content; users are
    the documents' users (speakers), held-out rows the test users' documents."""
    path = user_cache_dir() / "problems" / f"{identity_of(name)}-{_cache_key(name, seed, 0)}.npz"
    arrays = cached(path, on_one_thread(compute), save_npz, load_npz)
    return Problem(
        arrays["logp"],
        tuple(str(n) for n in arrays["names"]),
        users=arrays["users"],
        heldout_logp=arrays.get("heldout_logp"),
        task=TEXT_TASK,
        meta={"name": identity_of(name), "seed": str(seed)},
        heldout_users=arrays.get("test_users"),
    )


def image_problem(
    name: str, task: str, *, seed: int, shards: int, proxy: ProxySpec, users: np.ndarray | None = None
) -> Problem:
    """An image world's problem for ``task``: its proxies' log-likelihoods on the sensitive train
    split (held out: on the test split, when it has one); ``users`` per row, else seeded groups
    of USER_SIZE (MNIST has no writer ids)."""
    names, train, train_y, test, test_y, public, public_y, epochs = world_probabilities(name, seed, shards, proxy)
    n = len(train_y)
    if users is None:
        users = stream(seed, "problem-users", world=identity_of(name)).numpy().permutation(n) // USER_SIZE
    return Problem(
        logp=task_log_likelihood(train, train_y, task),
        sources=names,
        users=users.astype(np.int64),
        heldout_logp=task_log_likelihood(test, test_y, task) if len(test_y) else None,
        task=task,
        meta={"name": identity_of(name), "seed": str(seed), **proxy_meta(proxy, public, public_y, epochs)},
    )
