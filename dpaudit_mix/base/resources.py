"""Up-front memory checks (a request that cannot fit is refused with its size, not a
MemoryError), and forked children: bounded library calls, and work done alongside."""

from __future__ import annotations

import ctypes
import io
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from .errors import InputError, require

T = TypeVar("T")


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


#: bytes one pretraining image costs while it is sampled and trained on (28×28 float32: the
#: sampled copy, its tensor, a batch view and slack).
BYTES_PER_IMAGE = 4 * 28 * 28 * 4
#: bytes one text window (49 int64 codes) costs while sampled and trained on.
BYTES_PER_WINDOW = 4 * 49 * 8
#: bytes one synthetic image costs while the EDM samples it (Heun's intermediates at 14×14 and
#: the MLP's activations) and then as a 28×28 source image.
BYTES_PER_SYNTHETIC = 16 * 1024


def require_memory(needed: int, what: str) -> None:
    """Refuse ``what`` (e.g. "--runs 10^9") when it needs more memory than is available."""
    have = available_bytes()
    if have is not None:
        require(
            needed <= have,
            f"{what} needs about {needed / 2**30:.1f} GiB of memory and "
            f"{have / 2**30:.1f} GiB is available; ask for less",
        )


#: a library computation run under :func:`bounded` may take this long by default.
BOUNDED_SECONDS = 120.0
#: and this much memory beyond what the process already maps (also at most half the available).
BOUNDED_BYTES = 6 * 2**30


def _mapped_bytes() -> int:
    """The process's virtual size (VmSize), the base that RLIMIT_AS counts from."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def _child(
    fn: Callable[..., Any], args: tuple[Any, ...], write_end: int, budget: int, errors: tuple[type[InputError], ...]
) -> int:
    """The forked child's whole life: ``fn(*args)`` under the memory bound, its answer (an npz, or
    the kind and text of its failure) written to the pipe; the exit status to leave with."""
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)  # never above a limit the machine already sets
        soft = _mapped_bytes() + budget
        resource.setrlimit(resource.RLIMIT_AS, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        value = fn(*args)
        packed = value if isinstance(value, tuple) else (value,)
        buffer = io.BytesIO()
        np.savez(buffer, *[np.asarray(v) for v in packed], tuple=np.array(isinstance(value, tuple)))
        message = b"ok\n" + buffer.getvalue()
    except MemoryError:
        message = b"memory\n"
    except BaseException as exc:  # the parent decides what it means
        label = "input" if isinstance(exc, InputError) else "value" if isinstance(exc, ValueError) else "error"
        label = "arith" if isinstance(exc, ArithmeticError) else label
        label = next((f"input{i}" for i, e in enumerate(errors) if isinstance(exc, e)), label)
        message = f"{label}\n{exc}".encode()
    try:
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(message)
    except BaseException:
        return 1
    return 0


def bounded(
    fn: Callable[..., T],
    *args: Any,
    what: str,
    seconds: float = BOUNDED_SECONDS,
    errors: tuple[type[InputError], ...] = (),
) -> T:
    """``fn(*args)`` under a deadline and a memory bound, in a forked child (Linux), so that a
    library call that would grow without bound or never return is refused in one line instead.

    The result comes back as an ``.npz`` over a pipe (a float, an array or a tuple of arrays:
    never pickle). The child's InputError/ValueError/ArithmeticError come back with their message
    and type (``errors``: InputError subclasses the parent raises as themselves); a MemoryError
    or the deadline is an InputError naming ``what``.
    """
    return bounded_all(fn, [args], what=[what], seconds=seconds, errors=errors)[0]


def bounded_all(
    fn: Callable[..., T],
    calls: Sequence[tuple[Any, ...]],
    what: Sequence[str],
    seconds: float = BOUNDED_SECONDS,
    errors: tuple[type[InputError], ...] = (),
) -> list[T]:
    """:func:`bounded` for each argument tuple of ``calls`` (``what[i]`` names call i), as many
    children side by side as there are CPUs, each with its share of the memory bound and its own
    deadline; a lane that finishes starts the next call at once (calls of uneven length do not wait
    for each other). The answers come in the order of ``calls``. A child past its deadline is an
    InputError at once; else the first failure in the order of ``calls`` is raised: after a
    failure no call starts, the earlier calls still running are collected and the later stopped."""
    if not hasattr(os, "fork"):  # pragma: no cover - not Linux: run unguarded
        return [fn(*args) for args in calls]
    require(len(what) == len(calls), "bounded_all: one name per call")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    lanes = max(1, min(len(calls), cpus))
    have = available_bytes()
    budget = (BOUNDED_BYTES if have is None else min(BOUNDED_BYTES, have // 2)) // lanes
    answers: dict[int, tuple[bytes, bytes]] = {}
    running: dict[int, _Running] = {}  # read end of its pipe → the child
    started, first_failure = 0, len(calls)
    try:
        while True:
            while first_failure == len(calls) and len(running) < lanes and started < len(calls):
                pid, pipe = _fork(fn, calls[started], budget, errors)
                running[pipe] = _Running(started, pid, time.monotonic() + seconds)
                started += 1
            awaited = {pipe: child for pipe, child in running.items() if child.index < first_failure}
            if not awaited:
                break
            for pipe in _ready(awaited, seconds, what):
                child = running.pop(pipe)
                answers[child.index] = _finish(child, pipe)
                if answers[child.index][0] != b"ok":
                    first_failure = min(first_failure, child.index)
    finally:  # the children a failure left behind: stopped, reaped, their pipes closed
        for pipe, child in running.items():
            os.close(pipe)
            _stop(child.pid)
    if first_failure < len(calls):
        _decode(*answers[first_failure], what[first_failure], budget, errors)  # raises
    return [_decode(*answers[i], what[i], budget, errors) for i in range(len(calls))]


@dataclass
class _Running:
    """A child of :func:`bounded_all`: which call it computes, its pid, its deadline, what it has
    written so far."""

    index: int
    pid: int
    deadline: float
    chunks: list[bytes] = field(default_factory=list)


def _fork(
    fn: Callable[..., Any], args: tuple[Any, ...], budget: int, errors: tuple[type[InputError], ...]
) -> tuple[int, int]:
    """A child computing ``fn(*args)`` (:func:`_child`): its pid and the read end of its pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, and leave without running the parent's exit handlers
        os.close(read_end)
        os._exit(_child(fn, args, write_end, budget, errors))
    os.close(write_end)
    return pid, read_end


def _stop(pid: int) -> None:
    """Kill and reap the child ``pid`` (not reaped yet, so the pid is still its own)."""
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _ready(running: dict[int, _Running], seconds: float, what: Sequence[str]) -> list[int]:
    """The pipes whose child has closed them (its answer read whole), after reading what the
    running children have written; a child past its deadline is killed and an InputError."""
    while True:
        now = time.monotonic()
        late = min(running.values(), key=lambda c: c.deadline)
        if late.deadline <= now:
            raise InputError(
                f"{what[late.index]} did not finish in {seconds:g} s; the request is degenerate or too large"
            )
        readable = select.select(list(running), [], [], late.deadline - now)[0]
        done = []
        for pipe in readable:
            data = os.read(pipe, 1 << 20)
            if data:
                running[pipe].chunks.append(data)
            else:
                done.append(pipe)
        if done:
            return done


def _finish(child: _Running, pipe: int) -> tuple[bytes, bytes]:
    """A child that closed its pipe: the pipe closed here, the child reaped, its (kind, body)."""
    os.close(pipe)
    os.waitpid(child.pid, 0)
    kind, _, body = b"".join(child.chunks).partition(b"\n")
    return kind, body


def _decode(kind: bytes, body: bytes, what: str, budget: int, errors: tuple[type[InputError], ...]) -> Any:
    """A child's answer as its value, or its failure raised as its own type."""
    if kind == b"ok":
        with np.load(io.BytesIO(body), allow_pickle=False) as z:
            arrays = [z[f"arr_{i}"] for i in range(len(z.files) - 1)]
            if bool(z["tuple"]):
                return tuple(arrays)
            value = arrays[0]
            return value.item() if value.ndim == 0 else value
    text = body.decode(errors="replace")
    if kind == b"memory":
        raise InputError(f"{what} needs more than {budget / 2**30:.1f} GiB of memory; the request is degenerate")
    if kind.startswith(b"input"):
        index = kind[len(b"input") :]
        raise (errors[int(index)] if index else InputError)(text)
    if kind == b"value":
        raise ValueError(text)
    if kind == b"arith":
        raise ArithmeticError(text)
    raise InputError(f"{what} failed: {text or 'the computation died'}")


#: prctl's option that sends the child a signal when its parent thread dies (Linux).
PR_SET_PDEATHSIG = 1


@contextmanager
def alongside(fn: Callable[..., object], *args: Any, **kwargs: Any) -> Iterator[None]:
    """``fn(*args, **kwargs)`` in a forked child while the with-block runs in this process, for what it
    leaves on disk (an audit's checksummed chunks); the block's end waits for the child, and an
    exception out of the block kills it first. Nothing comes back, not even a failure: the caller
    then does the same work itself, finds the child's finished pieces and does (and reports on)
    the rest. Enter it while no other thread of this process computes: the child inherits no lock
    one holds."""
    if not hasattr(os, "fork"):  # pragma: no cover - not Linux: the caller does all the work after
        yield
        return
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os._exit(_side_work(fn, args, kwargs, parent))
    try:
        yield
        os.waitpid(pid, 0)
    except BaseException:
        _stop(pid)
        raise


def _side_work(fn: Callable[..., object], args: tuple[Any, ...], kwargs: dict[str, Any], parent: int) -> int:
    """An :func:`alongside` child's life: silent (the caller redoes and reports any failure),
    killed with its parent (a killed release leaves no audit running), the exit status to leave with."""
    try:
        with suppress(OSError, AttributeError):  # no prctl: it ends with its work
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl took effect
            return 1
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the child's until os._exit
        fn(*args, **kwargs)
    except BaseException:
        return 1
    return 0
