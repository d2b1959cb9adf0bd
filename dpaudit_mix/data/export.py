"""An embedded world written out in the file formats (`dpaudit-mix export-world NAME --out DIR`):
the embedded worlds become one data source among others, and the files path is checked against
the embedded one (a problem built from the export is byte-identical to the embedded problem).

Images are written as float32 in [0, 1] (the embedded worlds' own arrays, bit for bit); the
text world as ``.jsonl`` (sources without users, the sensitive splits with their speakers, and
the default rehearsal genre's speakers as ``validation``). The
manifest is ``data.toml``, named as the world itself so that it draws the same randomness.
The folder is written whole under a temporary name and renamed, so a failure leaves nothing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..base.atomic import write_npz, write_text
from ..base.errors import require
from . import registry
from .text import REHEARSAL_GENRE, speeches, text_world

MANIFEST = "data.toml"


def _toml(kind: str, name: str, parts: dict[str, str], sources: dict[str, str]) -> str:
    lines = [f'kind = "{kind}"', f'name = "{name}"', *(f'{key} = "{value}"' for key, value in parts.items())]
    return "\n".join([*lines, "", "[sources]", *(f'"{name}" = "{path}"' for name, path in sources.items())]) + "\n"


def _jsonl(texts: tuple[str, ...], users: np.ndarray | list[str] | None = None) -> str:
    rows = (
        [{"text": t} for t in texts]
        if users is None
        else [{"text": t, "user": u if isinstance(u, str) else int(u)} for t, u in zip(texts, users, strict=True)]
    )
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _write_image_world(name: str, seed: int, folder: Path) -> str:
    sources, sensitive = registry.world_sources(name, seed)
    validation = registry.world_validation(name, seed)
    (folder / "sources").mkdir()
    write_npz(folder / "sensitive.npz", images=sensitive.train_images, labels=sensitive.train_labels)
    write_npz(folder / "test.npz", images=sensitive.test_images, labels=sensitive.test_labels)
    write_npz(folder / "validation.npz", images=validation.images, labels=validation.labels)
    for source in sources:
        write_npz(folder / "sources" / f"{source.name}.npz", images=source.images, labels=source.labels)
    parts = {"sensitive": "sensitive.npz", "sensitive_test": "test.npz", "validation": "validation.npz"}
    return _toml("image", registry.identity(name), parts, {s.name: f"sources/{s.name}.npz" for s in sources})


def _write_text_world(seed: int, folder: Path) -> str:
    sources, train, test = text_world(seed)
    (folder / "sources").mkdir()
    write_text(folder / "sensitive.jsonl", _jsonl(train.texts, train.users))
    write_text(folder / "test.jsonl", _jsonl(test.texts, test.users))
    for source in sources:
        write_text(folder / "sources" / f"{source.name}.jsonl", _jsonl(source.texts))
    public = speeches(REHEARSAL_GENRE)  # public speakers: where a fair finetune rehearses
    write_text(folder / "validation.jsonl", _jsonl(tuple(t for _, t in public), [s for s, _ in public]))
    parts = {"sensitive": "sensitive.jsonl", "sensitive_test": "test.jsonl", "validation": "validation.jsonl"}
    return _toml("text", registry.TEXT_WORLD, parts, {s.name: f"sources/{s.name}.jsonl" for s in sources})


def export_world(name: str, out: Path, seed: int = 0) -> Path:
    """Write the embedded world ``name`` (data seed ``seed``) to the folder ``out`` (which must not
    exist); returns the manifest's path."""
    key = registry.canonical(name)
    require(not key.startswith("data."), f"{name} is a file world already")
    require(not out.exists(), f"{out} exists; export-world writes a new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        manifest = (
            _write_text_world(seed, staging) if key == registry.TEXT_WORLD else _write_image_world(key, seed, staging)
        )
        write_text(staging / MANIFEST, manifest)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out / MANIFEST
