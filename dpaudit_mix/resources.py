"""Up-front memory checks: a request that cannot fit is refused with its size, not a MemoryError."""

from __future__ import annotations

from .errors import require


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


def require_memory(needed: int, what: str) -> None:
    """Refuse ``what`` (e.g. "--runs 10^9") when it needs more memory than is available."""
    have = available_bytes()
    if have is not None:
        require(needed <= have, f"{what} needs about {needed / 2**30:.1f} GiB of memory and "
                f"{have / 2**30:.1f} GiB is available; ask for less")
