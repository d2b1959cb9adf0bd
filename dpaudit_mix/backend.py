"""Where independent pieces of work run: in this process, in local joblib workers, or as tasks on
a Dask cluster.

Every piece's randomness is its own named stream and callers place results by index, so the
backend is a speed setting, never part of a result: audits, recovery grids and pipelines give
identical output on any of them (each has a test). A Dask backend is connected before its caller
writes anything, so an unreachable scheduler is one line and exit 2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .errors import InputError, require

R = TypeVar("R")

BACKENDS = ("local", "dask")

#: how long a Dask scheduler may take to answer before the command gives up (exit 2).
CONNECT_TIMEOUT_S = 10


def dask_client(scheduler: str | None) -> Any:
    """A client connected to ``scheduler``, or one clear error."""
    from dask.distributed import Client

    require(scheduler is not None, "--backend dask needs --scheduler ADDR")
    try:
        return Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None


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
            return cls(workers)
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
        on Dask, ``shared`` (a world, a track) is sent to the cluster once, not with every task."""
        if self.client is not None:
            from dask.distributed import as_completed

            common = self.client.scatter(list(shared), hash=False) if shared else []
            futures = {self.client.submit(fn, *common, *args, pure=False): i for i, args in enumerate(items)}
            for future in as_completed(futures):
                yield futures[future], future.result()
            return
        if self.workers == 1:  # in this process, in order: what a caller patching a function relies on
            yield from ((i, fn(*shared, *args)) for i, args in enumerate(items))
            return
        from joblib import Parallel, delayed

        def indexed(i: int, args: tuple[Any, ...]) -> tuple[int, R]:
            return i, fn(*shared, *args)

        yield from Parallel(n_jobs=self.workers, prefer=prefer, return_as="generator_unordered")(
            delayed(indexed)(i, args) for i, args in enumerate(items)
        )
