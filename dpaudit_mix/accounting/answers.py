"""Answers kept in this process (ε by request, σ by calibration request): a cache that bounded
children fill as well, safe across fork."""

from __future__ import annotations

import os
import threading
from typing import Any


class Answers:
    """Answers kept in this process by request, at most ``size`` (the oldest dropped first),
    until the registered accountants change; unlike an lru_cache, it also takes the answers that
    :func:`epsilon_each` and :func:`calibrate_each` got from their children."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: dict[Any, float] = {}
        self._lock = threading.Lock()
        # a bounded child forked while another thread held the lock would wait for it forever
        os.register_at_fork(after_in_child=self._unlock)

    def _unlock(self) -> None:
        self._lock = threading.Lock()

    def get(self, key: Any) -> float | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: Any, value: float) -> float:
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.size:
                del self._entries[next(iter(self._entries))]
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


#: ε by (phases, δ, accountant), and σ by calibration request (:func:`_calibrate`'s arguments).
EPSILONS = Answers(4096)
SIGMAS = Answers(1024)
