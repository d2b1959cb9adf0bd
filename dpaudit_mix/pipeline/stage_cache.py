"""Finished stages on disk: a job's identity, a stage (a content key and how to compute it), and
the cache that keeps each under ``OUT/cache/<stage>/<key>`` with a checksum, in memory too."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from .. import problem as problem_io
from ..base.atomic import write_json
from ..base.cache import cached, content_key, load_json, load_npz, save_npz, verified

T = TypeVar("T")
Arrays = dict[str, np.ndarray]

#: the layout of the stage files; part of every file name, so a changed layout never loads an old file.
LAYOUT = 2


@dataclass(frozen=True)
class Job:
    """One cell of a track's grid: a method (for WarmSyn, an ablation row) at ε in seed ``seed``,
    for ``task`` (a mixing track's task: "multiclass", "lm", or a digit under the per-task protocol)."""

    method: str
    epsilon: float
    seed: int
    task: str = ""


@dataclass(frozen=True)
class Stage(Generic[T]):
    """One cached step of a job: its content key (which names its file) and how to compute it."""

    key: str
    compute: Callable[[], T]


def _save_finetuned(path: Path, value: dict[str, Any]) -> None:
    """A finetune's result (JSON, as bytes) and, under ``model``, its weights: one npz, no pickle."""
    result = json.dumps({k: v for k, v in value.items() if k != "model"}, sort_keys=True).encode()
    weights = {f"model.{name}": array for name, array in value.get("model", {}).items()}
    save_npz(path, {"result": np.frombuffer(result, dtype=np.uint8), **weights})


def _load_finetuned(path: Path) -> dict[str, Any]:
    arrays = load_npz(path)
    result: dict[str, Any] = json.loads(arrays["result"].tobytes().decode("utf-8"))
    model = {name.removeprefix("model."): a for name, a in arrays.items() if name.startswith("model.")}
    return {**result, "model": model} if model else result


#: a stage's kind: its file extension, how it is saved and loaded.
KINDS: dict[str, tuple[str, Callable[[Path, Any], None], Callable[[Path], Any]]] = {
    "arrays": ("npz", save_npz, load_npz),
    "json": ("json", write_json, load_json),
    "problem": ("npz", lambda path, value: problem_io.save(value, path), problem_io.load),
    "finetuned": ("npz", _save_finetuned, _load_finetuned),  # a finetune's result with its model's weights
}


class StageCache:
    """Finished stage outputs under ``root/<stage>/<key>.<ext>``, each reused only if it passes its
    checksum. A root that cannot be written is said once, then only read: the run holds its stages
    in memory and finishes. Nothing is created before the first stage (a preflight writes nothing).

    ``salt`` (a file world's content hash) is in every entry's name, so that stages computed on
    one version of a user's files are never reused for another (the stage keys, which seed the
    streams, name the world by its name only). A worker's cache (``root`` None) only holds what it
    computes, in ``computed``: the worker sends that back, and the parent offers it (:meth:`offer`)
    to the one cache where results land."""

    def __init__(self, root: Path | None, salt: str = "") -> None:
        self.root = root
        self.salt = salt  # a file world's content hash: its stages are never served for other files
        self.computed: dict[tuple[str, str, str], Any] = {}  # (stage, key, kind) → value, in memory
        self._offered: dict[tuple[str, str], Any] = {}

    @cached_property
    def writable(self) -> bool:
        if self.root is None:
            return False
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.root, prefix=".probe-"):
                pass
        except OSError as exc:
            print(
                f"dpaudit-mix: warning: cannot write the stage cache {self.root}: {exc.strerror or exc}; every "
                "stage is computed (none is kept for a rerun)",
                file=sys.stderr,
            )
            return False
        return True

    def _path(self, stage: str, key: str, kind: str) -> Path | None:
        if self.root is None:
            return None
        salted = {"data": self.salt} if self.salt else {}
        return self.root / stage / f"{content_key(key=key, layout=LAYOUT, **salted)}.{KINDS[kind][0]}"

    def get(self, stage: str, key: str, kind: str, compute: Callable[[], T]) -> T:
        """The stage's output: checked from disk, else offered by a worker, else computed (and saved)."""
        path = self._path(stage, key, kind)

        def value() -> T:
            if (stage, key) in self._offered:
                return self._offered.pop((stage, key))
            result = compute()
            if path is None:
                self.computed[(stage, key, kind)] = result
            return result

        if path is None:
            return value()
        _, save, load = KINDS[kind]
        return cached(path, value, save, load, write=self.writable)

    def has(self, stage: str, key: str, kind: str) -> bool:
        """Whether the stage is on disk with its checksum (its output is not loaded)."""
        path = self._path(stage, key, kind)
        return path is not None and verified(path)

    def offer(self, stage: str, key: str, kind: str, value: Any) -> None:
        """A worker's output: saved now when the cache is writable (a killed run keeps it), else
        held until the stage is asked for."""
        self._offered[(stage, key)] = value
        if self.writable:
            self.get(stage, key, kind, lambda: value)
            self._offered.pop((stage, key), None)  # on disk now (or already was)

    def arrays(self, stage: str, step: Stage[Arrays]) -> Arrays:
        return self.get(stage, step.key, "arrays", step.compute)

    def json(self, stage: str, step: Stage[Any]) -> Any:
        return self.get(stage, step.key, "json", step.compute)
