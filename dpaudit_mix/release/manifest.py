"""What a published release.json is bound by: its digest, and the paths it may name."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..cache import json_sha256


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 over the canonical JSON of every field but the digest itself."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return json_sha256(body, compact=True).hexdigest()


def public_path(path: Path, out: Path) -> str:
    """A file as a published manifest may name it: relative to the release folder ``out`` when it
    lies under that folder's parent (check-release finds it from there), else by its name alone:
    a machine's absolute paths, and the folders above, are not for publication."""
    relative = Path(os.path.relpath(path.resolve(), out.resolve()))
    return str(relative) if relative.parts[:2].count("..") <= 1 and not relative.is_absolute() else path.name
