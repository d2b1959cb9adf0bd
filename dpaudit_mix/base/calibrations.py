"""Calibrated noise multipliers remembered on disk, as *hints*: a rerun asks the accountant two
questions (is ε(σ) within the target? does a σ one tolerance smaller overshoot it?) instead of
the twenty of a fresh calibration, and a hint that fails either is calibrated afresh.

Nothing here is trusted: a hint only saves work when the accountant itself confirms it, so an
edited or stale file can cost time, never privacy. Keys name the request, the calibrating
library's version and this package's, so an upgrade starts afresh. Files live under
``user_cache_dir()/calibrations/`` (one small JSON each, written atomically); an unwritable
cache only costs the saving.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from .atomic import write_json
from .cache import json_sha256, user_cache_dir, versions

#: the libraries whose answers a hint stands for, and this package (its accountants' wiring).
LIBRARIES = ("dp-accounting", "opacus", "dpaudit-mix")


def _path(request: dict[str, Any]) -> Path:
    key = json_sha256({"request": request, "libraries": versions(LIBRARIES)}).hexdigest()
    return user_cache_dir() / "calibrations" / f"{key[:32]}.json"


def hint(request: dict[str, Any]) -> float | None:
    """The σ remembered for ``request``, if a readable, finite, positive one is (unverified)."""
    try:
        value = json.loads(_path(request).read_text(encoding="utf-8")).get("noise_multiplier")
    except (OSError, ValueError, AttributeError):
        return None
    ok = isinstance(value, float) and math.isfinite(value) and value > 0
    return value if ok else None


def remember(request: dict[str, Any], sigma: float) -> None:
    """Keep σ for ``request`` (best effort: an unwritable cache only costs the next calibration)."""
    with contextlib.suppress(OSError):
        write_json(_path(request), {"request": request, "noise_multiplier": float(sigma)})
