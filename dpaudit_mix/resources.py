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
