"""A data manifest: a user's own public sources and sensitive set, named in one TOML file.

    kind = "image"                  # or "text"
    name = "my-study"               # optional: the world's name in streams and reports (default: the file's stem)
    sensitive = "sensitive.npz"     # the mixing and finetuning data: its rows become the problem's rows
    sensitive_test = "test.npz"     # optional: held out for evaluation (the pipeline needs it)
    validation = "validation.npz"   # optional: public, in-distribution (text: with users); choices on it are free
    classes = 10                    # optional (images): labels are 0 … classes − 1 (at most 10)
    [sources]
    site-a = "a.npz"
    site-b = "b/"                   # image-folder layout: one subfolder per class

Paths are relative to the manifest. The file formats are :mod:`.image_files` and
:mod:`.text_files`; every fault is one :class:`~..errors.InputError` naming the file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import is_real, require
from ..base.specfile import read_spec_bytes, spec_table

KINDS = ("image", "text")
KEYS = {"kind", "name", "sensitive", "sensitive_test", "validation", "classes", "sources"}
#: a world's or a source's name: what reports, streams and file names carry.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: the most classes an image world may declare (the proxies and the CNN have 10 outputs).
MAX_CLASSES = 10
SUFFIXES = {"image": (".npz",), "text": (".txt", ".jsonl")}


@dataclass(frozen=True)
class DataManifest:
    """What a manifest names, every path resolved and checked to exist; ``content`` is its bytes."""

    path: Path
    content: bytes
    kind: str
    name: str
    sensitive: Path
    sensitive_test: Path | None
    validation: Path | None
    classes: int
    sources: tuple[tuple[str, Path], ...]


def is_manifest(name: str) -> bool:
    """Whether a world name is a data manifest's path (a ``.toml`` file)."""
    return name.endswith(".toml")


def _part(root: Path, value: object, key: str, kind: str, where: Path, folder_ok: bool) -> Path:
    require(isinstance(value, str) and value != "", f"{where}: {key} must be a path (a string), got {value!r}")
    path = (root / str(value)).resolve()
    require(path.exists(), f"{where}: {key} names {value!r}, which does not exist ({path})")
    if path.is_dir():
        require(kind == "image" and folder_ok, f"{where}: {key} = {value!r} is a folder; a {kind} {key} is a file")
        return path
    require(path.is_file(), f"{where}: {key} = {value!r} is not a regular file")
    require(
        path.suffix in SUFFIXES[kind],
        f"{where}: {key} = {value!r}: a {kind} world's files end in {' or '.join(SUFFIXES[kind])}"
        + (" (or name an image folder)" if kind == "image" and folder_ok else ""),
    )
    return path


def load_manifest(path: str | Path) -> DataManifest:
    """The manifest at ``path``, its keys and files checked (nothing is read beyond the manifest)."""
    where = Path(path)
    content = read_spec_bytes(where)
    raw = spec_table(where, content)
    unknown = sorted(set(raw) - KEYS)
    require(not unknown, f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KEYS))}")
    kind = raw.get("kind")
    require(kind in KINDS, f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    name = raw.get("name", where.stem)
    require(isinstance(name, str) and NAME.fullmatch(name) is not None, f"{where}: name {name!r} is not a plain name")
    require("sensitive" in raw, f'{where}: the sensitive set is missing (sensitive = "file")')
    sources: Any = raw.get("sources")
    require(
        isinstance(sources, dict) and len(sources) >= 1,
        f'{where}: [sources] must name at least one public source (name = "file")',
    )
    for source, value in sources.items():
        require(
            not isinstance(value, dict),
            f"{where}: source {source!r} is a table, not a path: quote a name with a dot "
            f'(["{source}.{next(iter(value), "")}" = "file"], as TOML reads a bare a.b as a table)',
        )
        require(NAME.fullmatch(source) is not None, f"{where}: source name {source!r} is not a plain name")
    classes = raw.get("classes", MAX_CLASSES)
    require(kind == "image" or "classes" not in raw, f"{where}: classes applies to image worlds (text has no labels)")
    require(
        is_real(classes) and math.isfinite(classes) and int(classes) == classes and 2 <= classes <= MAX_CLASSES,
        f"{where}: classes must be an integer from 2 to {MAX_CLASSES}, got {classes!r}",
    )
    root = where.resolve().parent
    optional = {key: raw.get(key) for key in ("sensitive_test", "validation")}
    return DataManifest(
        path=where.resolve(),
        content=content,
        kind=str(kind),
        name=name,
        sensitive=_part(root, raw["sensitive"], "sensitive", str(kind), where, folder_ok=True),
        sensitive_test=None
        if optional["sensitive_test"] is None
        else _part(root, optional["sensitive_test"], "sensitive_test", str(kind), where, folder_ok=True),
        validation=None
        if optional["validation"] is None
        else _part(root, optional["validation"], "validation", str(kind), where, folder_ok=True),
        classes=int(classes),
        sources=tuple((s, _part(root, v, f"source {s}", str(kind), where, folder_ok=True)) for s, v in sources.items()),
    )
