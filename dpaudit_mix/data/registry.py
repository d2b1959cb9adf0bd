"""`dpaudit-mix problem NAME`: problem files built from the embedded data."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import require
from ..problem import Problem
from .proxies import TASKS, class_probabilities, task_log_likelihood, train_proxy
from .sources import mnist_world, public_shards

PROBLEMS = ("mnist",)
DEFAULT_TASK = "digit-0"
#: examples per synthetic user: MNIST has no writer ids here, so users are seeded groups.
USER_SIZE = 3


#: the largest number of shard sources `build(..., shards=K)` offers for k-scaling.
MAX_SHARDS = 64


@lru_cache(maxsize=4)
def mnist_probabilities(seed: int, shards: int = 0) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray,
                                                                np.ndarray]:
    sources, sensitive = public_shards(shards, seed) if shards else mnist_world(seed)
    models = [train_proxy(s) for s in sources]
    train = np.stack([class_probabilities(m, sensitive.train_images) for m in models])
    test = np.stack([class_probabilities(m, sensitive.test_images) for m in models])
    return tuple(s.name for s in sources), train, sensitive.train_labels, test, sensitive.test_labels


def build(name: str, task: str = DEFAULT_TASK, seed: int = 0, shards: int = 0) -> Problem:
    """The problem ``name`` for ``task``: logp on the sensitive train split, held-out on test.

    ``shards`` = K > 0 replaces the named sources by K class-skewed shards of the public pool.
    """
    require(name in PROBLEMS, f"unknown problem {name!r}; available: {', '.join(PROBLEMS)}")
    require(task in TASKS, f"unknown task {task!r} for {name}; available: {', '.join(TASKS)}")
    require(0 <= shards <= MAX_SHARDS, f"{name} offers at most {MAX_SHARDS} shard sources, asked for {shards}")
    names, train, train_y, test, test_y = mnist_probabilities(seed, shards)
    n = len(train_y)
    users = np.random.default_rng(seed).permutation(n) // USER_SIZE
    return Problem(
        logp=task_log_likelihood(train, train_y, task),
        sources=names,
        users=users.astype(np.int64),
        heldout_logp=task_log_likelihood(test, test_y, task),
        task=task,
        meta={"name": name, "seed": str(seed)},
    )


def tasks(name: str) -> tuple[str, ...]:
    require(name in PROBLEMS, f"unknown problem {name!r}; available: {', '.join(PROBLEMS)}")
    return TASKS
