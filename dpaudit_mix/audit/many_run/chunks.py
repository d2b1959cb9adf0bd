"""Finished audit chunks on disk, trusted only after they pass their checks.

A chunk is one npz (no pickle) holding its run ids, its scores and the id of its audit. The
append-only ``manifest.jsonl`` starts with the audit id and gains one line per saved chunk: file,
run range and SHA-256. On resume a chunk is reused only if its manifest line, checksum, audit id,
run ids and scores all match; any other chunk is recomputed, with one warning line in all. A
lock on the output folder keeps a second live audit out, so two audits never share chunks.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...base import npz
from ...base.atomic import write_npz
from ...base.cache import sha256
from ...base.errors import InputError, require

FORMAT = "dpaudit-mix audit chunks v2: one npz per chunk (runs, scores, audit_id); manifest.jsonl lines"


class ChunkStore:
    """The chunks of one audit under ``root/chunks``; use as a context manager (it holds the lock)."""

    def __init__(self, root: Path, audit_id: str, keys: Sequence[str]) -> None:
        self.root = root / "chunks"
        self.audit_id = audit_id
        self.keys = tuple(keys)
        self.entries: dict[str, dict[str, Any]] = {}
        self.rejected: list[str] = []
        self._lock: int | None = None

    def __enter__(self) -> ChunkStore:
        require(
            not self.root.is_symlink(), f"{self.root} is a symbolic link; an audit keeps its chunks in a real folder"
        )
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            self._lock = None
            require(False, f"another audit is running in {self.root.parent}; wait for it or choose another --out")
        self._open_manifest()
        return self

    def __exit__(self, *exc: object) -> None:
        self.warn()
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor releases the lock (a kill releases it too)
            self._lock = None

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.jsonl"

    def _open_manifest(self) -> None:
        lines = self.manifest.read_text(encoding="utf-8").splitlines() if self.manifest.is_file() else []
        try:
            header = json.loads(lines[0]) if lines else {}
        except (json.JSONDecodeError, RecursionError):
            header = {}
        header = header if isinstance(header, dict) else {}
        if header.get("audit_id") != self.audit_id:
            # Another audit's chunks (it is not running: we hold the lock), or a damaged manifest:
            # remove only the chunks its manifest lists that are still what it wrote, never a
            # user's file (a damaged manifest lists none: its chunks are overwritten as recomputed).
            if lines:
                self.rejected.append("the chunks of a different audit or a damaged manifest (its own chunks cleared)")
            for entry in self._listed(lines[1:]):
                stale = self.root / str(entry.get("file", ""))
                ours = stale.parent == self.root and stale.is_file() and not stale.is_symlink()
                if ours and sha256(stale) == entry.get("sha256"):
                    stale.unlink()
            self._write_line({"audit_id": self.audit_id, "format": FORMAT}, truncate=True)
            return
        for entry in self._listed(lines[1:]):
            self.entries[str(entry["file"])] = entry

    @staticmethod
    def _listed(lines: list[str]) -> list[dict[str, Any]]:
        """The manifest's chunk entries (a line cut short by a kill is skipped: recomputed)."""
        entries = []
        for line in lines:
            try:
                entry = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(entry, dict) and isinstance(entry.get("file"), str) and "/" not in entry["file"]:
                entries.append(entry)
        return entries

    def _write_line(self, record: dict[str, Any], truncate: bool = False) -> None:
        with open(self.manifest, "w" if truncate else "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def name(self, setting: str, start: int) -> str:
        return f"{setting}-{start:012d}.npz"

    def load(self, setting: str, runs: np.ndarray) -> dict[str, np.ndarray] | None:
        """The chunk's scores if it exists and passes every check; None (recompute) otherwise."""
        name = self.name(setting, int(runs[0]))
        path = self.root / name
        entry = self.entries.get(name)
        if entry is None or not path.is_file():
            return None
        problem = self._check(path, entry, runs)
        if isinstance(problem, str):
            self.rejected.append(f"{name} ({problem})")
            path.unlink(missing_ok=True)
            return None
        return problem

    def _check(self, path: Path, entry: dict[str, Any], runs: np.ndarray) -> dict[str, np.ndarray] | str:
        if sha256(path) != entry.get("sha256"):
            return "checksum mismatch"
        if (entry.get("start"), entry.get("stop")) != (int(runs[0]), int(runs[-1]) + 1):
            return "manifest run range mismatch"
        try:
            data = npz.load(path, "audit chunk")
        except InputError as exc:  # a damaged, foreign or oversized chunk is recomputed
            return f"unreadable: {exc}"
        if str(data.get("audit_id", "")) != self.audit_id:
            return "belongs to another audit"
        if "runs" not in data or not np.array_equal(data["runs"], runs):
            return "run ids mismatch"
        if any(key not in data or data[key].shape != runs.shape for key in self.keys):
            return "missing or misshapen scores"
        return data

    def save(self, setting: str, runs: np.ndarray, scores: dict[str, np.ndarray]) -> None:
        name = self.name(setting, int(runs[0]))
        write_npz(self.root / name, runs=runs, audit_id=np.array(self.audit_id), **scores)
        entry = {"file": name, "start": int(runs[0]), "stop": int(runs[-1]) + 1, "sha256": sha256(self.root / name)}
        self._write_line(entry)
        self.entries[name] = entry

    def warn(self) -> None:
        """One warning line for every chunk that failed its checks so far."""
        if self.rejected:
            print(
                f"dpaudit-mix: warning: stored chunks failed their checks and are recomputed: "
                f"{'; '.join(self.rejected)}",
                file=sys.stderr,
            )
            self.rejected = []
