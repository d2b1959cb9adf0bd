"""The thread count as part of a result.

How a reduction is split across BLAS (or torch) threads changes the last bits of its sum, and an
iterative fit amplifies them: multinomial logistic proxies trained with OpenBLAS on 2 threads
and on 1 differ by up to 4.4 in a log-probability (mnist/digit-0), so a problem's bytes followed
the machine's core count. Whatever is cached, compared by digest or released is therefore
computed on one thread, and parallelism comes from our own threads and processes, whose pieces
each draw their own named stream.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: held while a process computes on one thread: torch's thread count is process-wide, so two such
#: computations in one process's threads (a Dask worker's) would reset it under each other.
#: Re-entrant: a stage may build a problem inside its own pin.
_ONE_THREAD = threading.RLock()


@contextmanager
def one_thread(torch: bool = True) -> Iterator[None]:
    """BLAS (every loaded OpenBLAS/OpenMP pool) and, with ``torch``, torch on one thread for the
    block, restored after it. ``torch=False`` leaves torch unloaded for work that never uses it
    (the logistic proxies: torch is seconds to import)."""
    from threadpoolctl import threadpool_limits

    with _ONE_THREAD:
        if torch:
            import torch as torch_module

            before = torch_module.get_num_threads()
            torch_module.set_num_threads(1)
        try:
            with threadpool_limits(1):
                yield
        finally:
            if torch:
                torch_module.set_num_threads(before)
