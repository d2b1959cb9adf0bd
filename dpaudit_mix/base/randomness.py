"""Every random draw in the package, from one place (docs/design.md §7).

A draw is made from a :class:`Stream`: a root seed, a *purpose* (what the randomness is for:
``"learner-noise"``, ``"finetune-batches"`` …) and named identifiers (a :class:`Key`: task, method, ε, seed,
run …). The triple is hashed into the spawn key of a numpy ``SeedSequence``, so two streams that
differ in purpose or in any identifier are independent, and the same triple always gives the
same draws (same seed ⇒ same result) whatever the order, chunking or backend. There are no stream
numbers to collide and no ``seed + 1``: a new use names a new purpose.

Anything that could be released draws instead from :class:`SecureSource`, the OS CSPRNG, which
cannot be replayed. Libraries that insist on torch's global generator (module initialisation)
get it only inside :func:`torch_scope`, which restores the global state afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch

#: bumped whenever the derivation below changes, so persisted results keyed by it are not reused.
VERSION = 1

#: every purpose a stream may name: a typo is a programming error, not a silent new stream.
PURPOSES = frozenset(
    {
        # the grouping of an image problem's examples into users
        "problem-users",
        # the mixing learner and its baselines
        "learner-noise",
        "random-search-candidates",
        "random-search-noise",
        # pipelines
        "pipeline-split",
        "pretrain-sample",
        "model-init",
        "pretrain-shuffle",
        "finetune-batches",
        "finetune-noise",
        "rehearsal-split",
        # WarmSyn
        "edm-train",
        "edm-sample",
        "warmup",
        # audits, recovery, verification
        "audit-mixing-rows",
        "audit-assignment",
        "audit-natural-canary",
        # the random order of tied membership scores (a randomized threshold test)
        "audit-tie-break",
        # the claimed mechanism's scores an audit's power is simulated on
        "audit-power",
        # the resampled fit behind an ε estimate's interval
        "audit-estimate",
        "recovery-subset",
        "recovery-tuning",
        "learner-tuning",
        "verify-conformance",
        # simulated membership scores (tests and benches of the score audit)
        "simulated-scores",
        # one-run audits: which canaries are in, and when each is sampled (an audit spec's seed
        # names them; a release's canaries, and attach() by default, draw from the CSPRNG)
        "canary-membership",
        "canary-sampling",
        # made-up model inputs for tests and benches (toy images, text windows, user picks)
        "synthetic-inputs",
    }
)


class RandomSource(Protocol):
    """What the mechanisms draw from: a seeded numpy Generator or the :class:`SecureSource`."""

    def standard_normal(self, size: int | tuple[int, ...]) -> np.ndarray: ...

    def random(self, size: int | tuple[int, ...]) -> np.ndarray: ...


def _canonical(value: object) -> object:
    """An identifier as JSON: numbers as floats unless integral ints (ε 1 and 1.0 name one stream)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if not float(value).is_integer() else int(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(_canonical(v) for v in value)
    raise TypeError(f"a stream identifier must be a number, string or sequence of them, got {type(value).__name__}")


_recording: list[tuple[str, tuple[tuple[str, object], ...]]] | None = None
_lock = threading.Lock()


@contextmanager
def recording() -> Iterator[list[tuple[str, tuple[tuple[str, object], ...]]]]:
    """Collect (purpose, identifiers) of every stream drawn from inside the block (tests use this
    to show that no two draws of a run share a stream)."""
    global _recording
    with _lock:
        _recording = []
        seen = _recording
    try:
        yield seen
    finally:
        with _lock:
            _recording = None


def _record(purpose: str, ids: tuple[tuple[str, object], ...]) -> None:
    if _recording is not None:
        with _lock:
            if _recording is not None:
                _recording.append((purpose, ids))


_registered: set[str] = set()  # purposes a user's mechanism, world or strategy draws with


def register_purpose(purpose: str) -> str:
    """Let streams name ``purpose``: a user's mechanism or world draws from streams of its own,
    as the built-ins do.

    Args:
      purpose: the stream's name.

    Returns:
      ``purpose``.

    Raises:
      InputError: a name the package already has (two uses would share one stream)."""
    if not isinstance(purpose, str) or not purpose or purpose in PURPOSES:
        raise ValueError(f"a new stream purpose must be a non-empty name the package does not use, got {purpose!r}")
    with _lock:
        _registered.add(purpose)
    return purpose


@dataclass(frozen=True)
class Key:
    """A root seed and named identifiers: what a unit of work (a method at ε in seed s) draws with.
    Each of its purposes is then a separate stream: ``key.stream("finetune-noise")``."""

    seed: int
    ids: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"a root seed must be an integer >= 0, got {self.seed!r}")
        names = [name for name, _ in self.ids]
        if len(set(names)) != len(names):
            raise ValueError(f"stream identifiers named twice: {names}")

    def child(self, **ids: object) -> Key:
        """The key with more identifiers (every stream of it distinct from the parent's)."""
        return Key(self.seed, self.ids + tuple((k, _canonical(v)) for k, v in ids.items()))

    def stream(self, purpose: str) -> Stream:
        return Stream(self, purpose)


@dataclass(frozen=True)
class Stream:
    """A key and a purpose: ``Key(seed).child(method="uniform", epsilon=1.0).stream("finetune-noise")``."""

    key: Key
    purpose: str

    def __post_init__(self) -> None:
        if self.purpose not in PURPOSES and self.purpose not in _registered:
            raise ValueError(
                f"unknown stream purpose {self.purpose!r}; a user's code names its own with randomness.register_purpose"
            )

    @cached_property
    def spawn_key(self) -> tuple[int, ...]:
        text = json.dumps([self.purpose, [[k, v] for k, v in self.key.ids]], separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).digest()  # 128 bits: no two names meet (2^-64 at 2^32 names)
        return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))

    def _sequence(self) -> np.random.SeedSequence:
        _record(self.purpose, self.key.ids)
        return np.random.SeedSequence(int(self.key.seed), spawn_key=self.spawn_key)

    def run(self, index: int) -> np.random.Generator:
        """The generator of run ``index`` of this stream, independent of every other run and named
        stream (SeedSequence's own child key: the parent's words and the index, one word
        longer than any named stream's), without hashing a name per run in the learner's loop."""
        if _recording is not None:
            _record(self.purpose, (*self.key.ids, ("run", int(index))))
        return np.random.Generator(
            np.random.PCG64(np.random.SeedSequence(self.key.seed, spawn_key=self.spawn_key + (index,)))
        )

    def numpy(self) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(self._sequence()))

    def integer(self) -> int:
        """A 63-bit integer seed, for torch generators and libraries that take an int."""
        return int(self._sequence().generate_state(1, np.uint64)[0] >> np.uint64(1))

    def torch(self) -> torch.Generator:
        import torch

        return torch.Generator().manual_seed(self.integer())


#: The embedded worlds' public layout (which image or speaker goes where), frozen as the v1
#: benchmark: every figure measured on the worlds (λ★ per task, the README's tables) depends on
#: it. These are data-set definitions, never privacy randomness; each part has its own stream.
#: "pool" continues into the mnist-labels sources' samples (one generator, as built).
WORLD_LAYOUT: dict[str, tuple[int, ...]] = {
    "pool": (),
    "shards": (2,),
    "shift-sources": (7,),
    "graded-sources": (8,),
    "validation-slice": (9,),
    "text-test-speakers": (11,),
    "bad-sources": (12,),
    "fashion-pool": (13,),
    "fashion-sources": (14,),
}


def world_layout(seed: int, part: str) -> np.random.Generator:
    """The generator that lays out ``part`` of an embedded world under data seed ``seed``."""
    if part not in WORLD_LAYOUT:
        raise ValueError(f"unknown world layout part {part!r}; known: {sorted(WORLD_LAYOUT)}")
    return np.random.default_rng([seed, *WORLD_LAYOUT[part]] if WORLD_LAYOUT[part] else seed)


def stream(root: int, purpose: str, /, **ids: object) -> Stream:
    """Shorthand for ``Key(root).child(**ids).stream(purpose)``."""
    return Key(root).child(**ids).stream(purpose)


@contextmanager
def torch_scope(source: Stream) -> Iterator[None]:
    """torch's global generator seeded from ``source`` inside the block only (module constructors
    initialise their weights from it and take no generator); the caller's state is restored."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(source.integer())
        yield


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


def secure_root() -> int:
    """A root seed from the OS CSPRNG (63 bits), for draws that read only public data but follow
    a release that has no seed (a public rehearsal's noise): never replayable from anything else."""
    return int(np.frombuffer(os.urandom(8), dtype=np.uint64)[0] >> np.uint64(1))


def source(noise: Stream | None) -> RandomSource:
    """The stream's generator, or the OS CSPRNG when there is none (``None`` = release mode)."""
    return SecureSource() if noise is None else noise.numpy()
