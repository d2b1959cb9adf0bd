"""Randomness for the learner (DESIGN §4): one stream per run, or the OS CSPRNG for releases.

Run r's stream is derived from (root seed, r) alone, so its result does not depend on chunking,
order or backend. The secure source draws from ``os.urandom`` and cannot be replayed.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np


class RandomSource(Protocol):
    def standard_normal(self, size: int | tuple[int, ...]) -> np.ndarray: ...

    def random(self, size: int | tuple[int, ...]) -> np.ndarray: ...


def run_stream(seed: int, run: int) -> np.random.Generator:
    """The independent, reproducible stream of run ``run`` under root seed ``seed``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(run,))))


class SecureSource:
    """Uniforms and Gaussians from the OS CSPRNG (Box–Muller on 53-bit uniforms)."""

    def random(self, size: int | tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(size))
        words = np.frombuffer(os.urandom(8 * count), dtype=np.uint64)
        return ((words >> np.uint64(11)).astype(np.float64) * 2.0**-53).reshape(size)

    def standard_normal(self, size: int | tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(size))
        half = (count + 1) // 2
        u1 = 1.0 - self.random(half)  # in (0, 1], so the log is finite
        u2 = self.random(half)
        radius = np.sqrt(-2.0 * np.log(u1))
        z = np.concatenate([radius * np.cos(2 * np.pi * u2), radius * np.sin(2 * np.pi * u2)])
        return z[:count].reshape(size)
