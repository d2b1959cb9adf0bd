"""Reading arrays a user hands in (score files, problem files, chunk stores) without trusting them.

An ``.npz`` is a zip of ``.npy`` members, and a compressed member can inflate a thousandfold (a
1.5 MB file of zeros inflated to 14.8 GB before this module). So every member's ``.npy`` header
is read first, from the zip's stream, and its dtype and size are checked before a byte of data is
inflated: object and structured arrays are refused (nothing is ever unpickled), and the arrays
together must fit in memory with the caller's working copies. Every failure of a malformed file
is one :class:`InputError` naming the file and what it is, never a traceback or a "machine fault".
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InputError, require
from .resources import available_bytes

#: a caller's working memory per inflated byte (its float64 copies, sorts and concatenations).
WORKING_COPIES = 4
#: the most bytes one file's arrays may inflate to whatever memory says (a guard where
#: /proc/meminfo cannot be read, and a cap that keeps a single input from taking the machine).
MAX_INFLATED_BYTES = 8 * 2**30
#: a caller's measured working bytes for the arrays these headers describe.
Working = Callable[[Sequence["Member"]], int]
#: dtype kinds a numeric input may hold: integers, unsigned integers, real floats.
NUMERIC_KINDS = "iuf"


@dataclass(frozen=True)
class Member:
    """One array's header: what inflating it would produce."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=object)) * self.dtype.itemsize


def _describe(content: bytes) -> str:
    """What a file that is not an npz archive looks like, for the message."""
    if content.startswith(b"\x93NUMPY"):
        return "a single .npy array (np.save), not an .npz archive of named arrays (np.savez)"
    if not content:
        return "empty"
    head = content[:512]
    if all(32 <= b < 127 or b in b"\t\r\n" for b in head):
        return "a text file (a CSV?), not an .npz archive"
    return "not an .npz archive (no zip directory)"


#: the longest ``.npy`` header read (numpy's own default limit): a header states its length
#: first, and numpy reads that many bytes before it checks them, inflating a forged length.
MAX_HEADER_BYTES = 10_000
#: bytes of the length field by .npy format version.
_LENGTH_BYTES = {(1, 0): 2, (2, 0): 4, (3, 0): 4}


def _header(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> Member:
    name = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else info.filename
    with archive.open(info) as stream:
        magic = stream.read(8)
        require(
            len(magic) == 8 and magic[:6] == b"\x93NUMPY",
            f"{where}: member {info.filename!r} is not a .npy array",
        )
        version = (magic[6], magic[7])
        require(version in _LENGTH_BYTES, f"{where}: array '{name}' has an unknown .npy format version {version}")
        length_field = stream.read(_LENGTH_BYTES[version])
        length = int.from_bytes(length_field, "little")
        require(
            length <= MAX_HEADER_BYTES,
            f"{where}: array '{name}' states a {length}-byte header (at most {MAX_HEADER_BYTES}); refusing it",
        )
        raw = io.BytesIO(magic + length_field + stream.read(length))
        np.lib.format.read_magic(raw)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = reader(raw, max_header_size=MAX_HEADER_BYTES)
    require(
        not dtype.hasobject and dtype.fields is None,
        f"{where}: array '{name}' has dtype {dtype} (objects or records); only plain numeric or text arrays are read",
    )
    return Member(name, tuple(int(s) for s in shape), dtype)


def headers(content: bytes, where: str) -> list[Member]:
    """Every member's header, read without inflating any data."""
    require(zipfile.is_zipfile(io.BytesIO(content)), f"{where} is {_describe(content)}")
    try:
        with zipfile.ZipFile(io.BytesIO(content)) as archive:
            return [_header(archive, info, where) for info in archive.infolist()]
    except InputError:
        raise
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
        raise InputError(f"{where} is a damaged .npz archive: {exc}") from None


def check_fits(members: Iterable[Member], where: str, working: Working | None = None) -> None:
    """Refuse arrays that would not fit: the bytes the caller measured it works in (``working`` of
    the headers), else their inflated bytes times its working copies; and never past
    MAX_INFLATED_BYTES inflated."""
    members = list(members)
    inflated = sum(m.nbytes for m in members)
    need = WORKING_COPIES * inflated if working is None else working(members)
    have = available_bytes()
    require(
        inflated <= MAX_INFLATED_BYTES and (have is None or need <= have),
        f"{where} inflates to {inflated / 2**30:.2f} GiB of arrays and needs {need / 2**30:.2f} GiB to work on, "
        f"more than this machine can read safely ({_room(have)}); refusing it before inflating",
    )


def _room(have: int | None) -> str:
    cap = f"at most {MAX_INFLATED_BYTES / 2**30:.0f} GiB inflated"
    return cap if have is None else f"{have / 2**30:.2f} GiB available, {cap}"


def read_file(path: Path, what: str) -> bytes:
    """The bytes of a user's input file, read once (a folder, a device or a missing file: one line)."""
    check_file(path, what)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def check_file(path: Path, what: str) -> None:
    """That ``path`` is a regular file small enough to read, before anything else is said of it."""
    require(path.exists(), f"{what} not found: {path}")
    require(not path.is_dir(), f"{what} {path} is a folder, not a file")
    require(path.is_file(), f"{what} {path} is not a regular file")
    have = available_bytes()
    size = path.stat().st_size
    require(
        have is None or size <= have // WORKING_COPIES,
        f"{what} {path} is {size / 2**30:.2f} GiB, more than this machine can read safely",
    )


def loads(content: bytes, where: str, working: Working | None = None) -> dict[str, np.ndarray]:
    """Every array of an ``.npz``'s bytes, after its headers pass (dtype, size against memory:
    :func:`check_fits`)."""
    check_fits(headers(content, where), where, working)
    try:
        with np.load(io.BytesIO(content), allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
        raise InputError(f"{where} is a damaged .npz archive: {exc}") from None


def load(path: Path, what: str) -> dict[str, np.ndarray]:
    """:func:`loads` of the file at ``path`` (``what`` names it in messages: "scores file")."""
    return loads(read_file(path, what), f"{what} {path}")


def numeric(array: np.ndarray, where: str) -> np.ndarray:
    """``array`` as float64 if it holds real numbers (no complex, text, dates or records)."""
    require(
        array.dtype.kind in NUMERIC_KINDS,
        f"{where} must hold real numbers, got dtype {array.dtype}",
    )
    return array.astype(np.float64, copy=False)
