"""The character alphabet shared by the text world's n-gram proxies and its character LM.

Text is lower-cased onto a fixed alphabet; anything else is one "other" symbol, and code 0 pads a
sequence's start, so every model sees the same V codes. The LM reads text in windows of WINDOW
characters (here, so that a spec can be checked without loading torch).
"""

from __future__ import annotations

import numpy as np

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,;:!?'-\n"
OTHER = len(ALPHABET) + 1  # codes 1..len(ALPHABET) are letters; 0 pads a sequence's start
V = OTHER + 1
#: characters the character LM predicts per window; a window holds WINDOW + 1 codes.
WINDOW = 48
_LOOKUP = np.full(0x110000, OTHER, dtype=np.int64)
_LOOKUP[[ord(ch) for ch in ALPHABET]] = np.arange(1, len(ALPHABET) + 1)


def encode(text: str) -> np.ndarray:
    """The codes of ``text``, one per character of ``text.lower()`` (int64)."""
    return codes(text.lower())


def codes(lowered: str) -> np.ndarray:
    """The codes of already lower-cased text, one per character (int64)."""
    points = np.frombuffer(lowered.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    return _LOOKUP[np.minimum(points, 0x10FFFF)]
