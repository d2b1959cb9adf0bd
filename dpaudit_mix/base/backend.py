"""Where independent pieces of work run: in this process, in local joblib workers, or as tasks on
a Dask cluster.

Every piece's randomness is its own named stream and callers place results by index, so the
backend is a speed setting, never part of a result: audits, recovery grids and pipelines give
identical output on any of them (each has a test). A Dask backend is connected before its caller
writes anything, so an unreachable scheduler is one line and exit 2.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .errors import InputError, require

R = TypeVar("R")

BACKENDS = ("local", "dask")

#: glibc's mallopt parameters, and the mmap threshold its dynamic default rises to (64-bit).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX = -1, -3, 32 << 20

#: how long a Dask scheduler may take to answer before the command gives up (exit 2).
CONNECT_TIMEOUT_S = 10


def dask_client(scheduler: str | None) -> Any:
    """A client connected to ``scheduler``, or one clear error within :data:`CONNECT_TIMEOUT_S`
    (plus a second). Distributed's own timeout covers the TCP connect, not the handshake read
    after it: an HTTP server or a listener that accepts and never answers held ``Client`` for
    minutes. So the client is built on a daemon thread that this one waits for, with the deadline;
    a thread still waiting on a silent listener is left to die with the process."""
    from dask.distributed import Client

    require(scheduler is not None, "--backend dask needs --scheduler ADDR")
    built: list[Any] = []
    failed: list[BaseException] = []

    def build() -> None:
        try:
            built.append(Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s"))
        except BaseException as exc:  # handed to the waiting thread, which decides
            failed.append(exc)

    thread = threading.Thread(target=build, name="dask-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT_S + 1)
    if built:
        return built[0]
    if not failed:
        raise InputError(
            f"cannot reach the Dask scheduler at {scheduler}: no Dask handshake within {CONNECT_TIMEOUT_S} s "
            "(is it a Dask scheduler?)"
        )
    if isinstance(failed[0], (OSError, TimeoutError, ValueError)):
        raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {failed[0]}") from None
    raise failed[0]


def _roomy_malloc() -> None:
    """Dask's nannies start workers with ``MALLOC_TRIM_THRESHOLD_=65536``: glibc then returns
    memory to the OS after nearly every free, and torch's stage loops, which allocate and free
    activations at every step, ran 2.2× slower (a pipeline seed: 6.2 s against 2.8 s). Raise both
    thresholds to where glibc's own dynamic default would take them; without glibc, nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
    libc.mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_MAX)


#: how often a local worker checks that the process that started it is still alive.
PARENT_POLL_S = 1.0

_watching = threading.Lock()
_watched: list[int] = []  # the parent this worker process already watches (at most one)


def _die_with(parent: int) -> None:
    """Start, once per worker process, a daemon thread that ends the process when ``parent`` is
    gone (the worker is re-parented): loky's initializer. Loky's workers outlived a ``kill -9`` of
    the pipeline that started them by 10 minutes and more, and held its resource trackers alive
    with them."""
    with _watching:
        if _watched:
            return
        _watched.append(parent)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _capped(workers: int) -> int:
    """``workers`` capped by the usable cores, said once on stderr (``--workers 10000`` started 31
    processes for a 4-cell grid before each call was also capped by its pieces of work)."""
    cores = usable_cores()
    if workers > cores:
        print(
            f"dpaudit-mix: note: --workers {workers} is more than the {cores} usable cores; running {cores}",
            file=sys.stderr,
        )
    return min(workers, cores)


def _on_worker(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` on a Dask worker, its allocator set up first (:func:`_roomy_malloc`)."""
    _roomy_malloc()
    return fn(*args)


@dataclass(frozen=True)
class Backend:
    """``workers`` local joblib workers (1: this process, in order), or a connected Dask ``client``."""

    workers: int = 1
    client: Any = None

    @classmethod
    def connect(cls, name: str, scheduler: str | None = None, workers: int = 1) -> Backend:
        require(name in BACKENDS, f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
        require(isinstance(workers, int) and workers >= 1, f"workers must be an integer >= 1, got {workers!r}")
        if name == "local":
            require(scheduler is None, "--scheduler needs --backend dask")
            return cls(_capped(workers))
        return cls(workers, dask_client(scheduler))

    @property
    def parallel(self) -> bool:
        return self.client is not None or self.workers > 1

    @property
    def label(self) -> str:
        return "dask" if self.client is not None else f"{self.workers} workers"

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def unordered(
        self,
        fn: Callable[..., R],
        items: Sequence[tuple[Any, ...]],
        prefer: Literal["processes", "threads"] = "processes",
        shared: tuple[Any, ...] = (),
    ) -> Iterator[tuple[int, R]]:
        """``(i, fn(*shared, *items[i]))`` for every item, as each finishes. Local workers are
        joblib processes (``prefer="threads"`` for work that releases the GIL, like numpy's BLAS);
        on Dask, ``shared`` (a world, a track) is sent to every worker once, not with every task
        (to every worker: data on one would draw every task to it)."""
        if self.client is not None:
            from dask.distributed import as_completed

            common = self.client.scatter(list(shared), hash=False, broadcast=True) if shared else []
            futures = {
                self.client.submit(_on_worker, fn, *common, *args, pure=False): i for i, args in enumerate(items)
            }
            for future in as_completed(futures):
                yield futures[future], future.result()
            return
        if self.workers == 1:  # in this process, in order: what a caller patching a function relies on
            yield from ((i, fn(*shared, *args)) for i, args in enumerate(items))
            return
        from joblib import Parallel, delayed, parallel_config

        def indexed(i: int, args: tuple[Any, ...]) -> tuple[int, R]:
            return i, fn(*shared, *args)

        # loky's processes watch this one from their start (an idle worker outlived it too);
        # never more workers than pieces (``--workers`` is capped by the cores at connect)
        config = (
            parallel_config(backend="loky", initializer=_die_with, initargs=(os.getpid(),))
            if prefer == "processes"
            else parallel_config(backend="threading")
        )
        with config:  # read when the Parallel is built, so it does not span this generator's yields
            parallel = Parallel(n_jobs=max(1, min(self.workers, len(items))), return_as="generator_unordered")
        yield from parallel(delayed(indexed)(i, args) for i, args in enumerate(items))
