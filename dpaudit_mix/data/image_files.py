"""Image sets from a user's files: an ``.npz`` (``images``, ``labels``, optional ``users``) or an
image folder (one subfolder per class, PNG or JPEG, read with Pillow).

``images`` is uint8 (0–255) or float32 in [0, 1] (what ``export-world`` writes, so that an
embedded world's files reproduce it bit for bit), of shape (N, H, W) or (N, H, W, C) with C = 1,
3 or 4. Every image becomes what the proxies and the SmallCNN take, 28 × 28 grey in [0, 1]:
RGB by ITU-R 601 luma (0.299 R + 0.587 G + 0.114 B), an alpha channel dropped, then resized
with Pillow's bilinear filter (antialiased when shrinking) unless it is 28 × 28 already (then
untouched). Conversion runs in chunks of at most CHUNK_VALUES pixel values, so a large source
is never held twice.

Sizes are checked from the headers before a pixel is decoded: an image of more than
MAX_IMAGE_PIXELS, or a source of more than MAX_SOURCE_VALUES pixel values, is one line naming
the file and its size (a 760 KB npz of two blank 20000 × 20000 images inflated to 6.9 GB
before; Pillow's own bomb check is never what the user sees).

A folder's classes are its subfolders: their integer names when every name is an integer,
else their positions in sorted order (torchvision's ImageFolder convention).

Each file is read once; its sha256 is taken of exactly the bytes that are parsed, so a file
that changes while it is read cannot be hashed as one thing and used as another.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..base import npz
from ..base.errors import InputError, require

SIZE = 28
#: pixel values converted at once (float32: 32 MiB), so a chunk is never more than that however large its images.
CHUNK_VALUES = 2**23
#: the largest image read (4096 × 4096): every image becomes 28 × 28, and larger ones are a bomb, not data.
MAX_IMAGE_PIXELS = 2**24
#: the most pixel values one source may hold (N · H · W · C; 512 MiB as uint8, 2 GiB as float32):
#: 680,000 images of 28 × 28, or 3,500 RGB images of 224 × 224.
MAX_SOURCE_VALUES = 2**29
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
LUMA = np.array([0.299, 0.587, 0.114])


@dataclass(frozen=True)
class ImageSet:
    """Images as the package uses them, their labels, optional users, and the sha256 of what was read."""

    images: np.ndarray  # (N, 28, 28) float32 in [0, 1]
    labels: np.ndarray  # (N,) int64
    users: np.ndarray | None  # (N,) int64, or None
    digest: str


def _grey(images: np.ndarray, where: str) -> np.ndarray:
    """(N, H, W[, C]) uint8 or float32 → (N, H, W) float32 in [0, 1]."""
    values = images.astype(np.float32) / 255.0 if images.dtype == np.uint8 else images
    if values.ndim == 4:
        channels = values.shape[3]
        require(channels in (1, 3, 4), f"{where}: images have {channels} channels; 1, 3 or 4 are read")
        values = values[..., 0] if channels == 1 else (values[..., :3] @ LUMA.astype(np.float32))
    return values.astype(np.float32, copy=False)


def _check_size(shape: tuple[int, ...], where: str) -> None:
    """Refuse, from a header's shape (N, H, W[, C]), images or a source too large to decode."""
    if len(shape) < 3:
        return  # the shape's own check names it
    pixels = shape[1] * shape[2]
    require(
        pixels <= MAX_IMAGE_PIXELS,
        f"{where}: images of {shape[1]} × {shape[2]} pixels, more than the {MAX_IMAGE_PIXELS:,} per image read "
        "(every image becomes 28 × 28): resize them first",
    )
    values = int(np.prod(shape, dtype=object))
    require(
        values <= MAX_SOURCE_VALUES,
        f"{where}: {shape[0]:,} images of shape {shape[1:]} are {values:,} pixel values, more than the "
        f"{MAX_SOURCE_VALUES:,} one source may hold: resize them first, or give fewer",
    )


def _resized(grey: np.ndarray) -> np.ndarray:
    if grey.shape[1:] == (SIZE, SIZE):
        return grey
    from PIL import Image

    out = np.empty((len(grey), SIZE, SIZE), dtype=np.float32)
    for i, image in enumerate(grey):
        resized = Image.fromarray(image, mode="F").resize((SIZE, SIZE), Image.Resampling.BILINEAR)
        out[i] = np.clip(np.asarray(resized, dtype=np.float32), 0.0, 1.0)
    return out


def standard(images: np.ndarray, where: str) -> np.ndarray:
    """Checked images, converted chunk by chunk to (N, 28, 28) float32 in [0, 1]."""
    require(
        images.dtype in (np.uint8, np.float32),
        f"{where}: images must be uint8 (0-255) or float32 in [0, 1], got dtype {images.dtype}",
    )
    require(images.ndim in (3, 4), f"{where}: images must be (N, H, W) or (N, H, W, C), got shape {images.shape}")
    require(len(images) >= 1, f"{where}: no images")
    require(min(images.shape[1:3]) >= 1, f"{where}: images of size {images.shape[1:3]}")
    _check_size(images.shape, where)
    if images.dtype == np.float32:
        require(bool(np.all(np.isfinite(images))), f"{where}: images hold NaN or inf pixels")
        require(
            float(images.min()) >= 0 and float(images.max()) <= 1,
            f"{where}: float32 images must lie in [0, 1], got [{float(images.min()):g}, {float(images.max()):g}]",
        )
    chunk = max(1, CHUNK_VALUES // int(np.prod(images.shape[1:])))
    return np.concatenate([_resized(_grey(images[i : i + chunk], where)) for i in range(0, len(images), chunk)])


def _labels(labels: np.ndarray, count: int, classes: int, where: str, name: str = "labels") -> np.ndarray:
    require(labels.ndim == 1, f"{where}: {name} must be 1-D, got shape {labels.shape}")
    require(labels.dtype.kind in "iu", f"{where}: {name} must be integers, got dtype {labels.dtype}")
    require(len(labels) == count, f"{where}: {count} images but {len(labels)} {name}")
    if name == "labels" and len(labels):
        low, high = int(labels.min()), int(labels.max())
        require(
            low >= 0 and high < classes,
            f"{where}: labels must be 0 … {classes - 1} (the declared classes), got {low} … {high}",
        )
    return labels.astype(np.int64)


def _from_npz(
    content: bytes, where: str, classes: int, users_allowed: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    for member in npz.headers(content, where):  # sizes from the headers, before anything inflates
        if member.name == "images":
            _check_size(member.shape, where)
    arrays = npz.loads(content, where)
    extra = sorted(set(arrays) - {"images", "labels", "users"})
    require(
        "images" in arrays and "labels" in arrays, f"{where}: needs arrays 'images' and 'labels', has {sorted(arrays)}"
    )
    require(not extra, f"{where}: unknown arrays {', '.join(extra)} (images, labels and, for the sensitive set, users)")
    require(users_allowed or "users" not in arrays, f"{where}: only the sensitive set may give users")
    images = standard(arrays["images"], where)
    labels = _labels(arrays["labels"], len(images), classes, where)
    users = None if "users" not in arrays else _labels(arrays["users"], len(images), classes, where, "users")
    if users is not None:
        missing = int(np.sum(users < 0))
        require(missing == 0, f"{where}: {missing} rows have no user (a negative id): give every row a user, or none")
    return images, labels, users


def _folder_classes(root: Path, where: str, classes: int) -> list[tuple[int, Path]]:
    folders = sorted(p for p in root.iterdir() if p.is_dir())
    require(bool(folders), f"{where}: an image folder needs one subfolder per class, found none")
    names = [p.name for p in folders]
    numbered = all(n.isdigit() for n in names)
    indices = [int(n) for n in names] if numbered else list(range(len(names)))
    worst = int(np.argmax(indices))
    require(
        indices[worst] < classes,
        f"{where}: class {names[worst]!r} is label {indices[worst]}, outside the declared classes 0 … {classes - 1}",
    )
    return list(zip(indices, folders, strict=True))


def _from_folder(root: Path, where: str, classes: int, digest: hashlib._Hash) -> tuple[np.ndarray, np.ndarray]:
    pictures, labels, shape, values = [], [], None, 0
    for label, folder in _folder_classes(root, where, classes):
        for path in sorted(p for p in folder.iterdir() if p.is_file()):
            require(path.suffix.lower() in IMAGE_SUFFIXES, f"{path}: not a PNG or JPEG image (in image folder {where})")
            content = npz.read_file(path, "image")
            digest.update(str(path.relative_to(root)).encode() + b"\0" + hashlib.sha256(content).digest())
            picture = _picture(content, path)
            values += picture.size
            require(
                values <= MAX_SOURCE_VALUES,
                f"{where}: its images hold more than the {MAX_SOURCE_VALUES:,} pixel values one source may hold "
                f"(at {path}): resize them first, or give fewer",
            )
            require(
                shape is None or picture.shape == shape,
                f"{path}: size {picture.shape}, but the folder's images are {shape}",
            )
            shape = picture.shape
            pictures.append(picture)
            labels.append(label)
    require(bool(pictures), f"{where}: the image folder holds no images")
    stacked = np.stack(pictures)
    return standard(stacked if stacked.dtype == np.uint8 else stacked.astype(np.uint8), where), np.array(
        labels, dtype=np.int64
    )


def _picture(content: bytes, path: Path) -> np.ndarray:
    """One PNG or JPEG, its size checked from its header before it is decoded."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    def too_large(size: str) -> str:
        return (
            f"{path}: an image of more than {MAX_IMAGE_PIXELS:,} pixels{size}: every image becomes 28 × 28, "
            "resize it first"
        )

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our cap is lower, and ours is said
            with Image.open(io.BytesIO(content)) as opened:
                width, height = opened.size
                require(width * height <= MAX_IMAGE_PIXELS, too_large(f" ({width} × {height})"))
                opened.load()
                return np.asarray(opened.convert("L") if opened.mode not in ("L", "RGB", "RGBA") else opened)
    except Image.DecompressionBombError:
        raise InputError(too_large("")) from None
    except InputError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise InputError(f"{path}: unreadable or truncated image: {exc}") from None


def read_images(path: Path, classes: int, *, users_allowed: bool = False, source: bool = False) -> ImageSet:
    """The image set at ``path`` (an ``.npz`` or an image folder); ``source``: a public source,
    which must hold at least two classes (a source of one class trains no proxy)."""
    where = str(path)
    if path.is_dir():
        digest = hashlib.sha256(b"image-folder\0")
        images, labels = _from_folder(path, where, classes, digest)
        users, hexdigest = None, digest.hexdigest()
    else:
        content = npz.read_file(path, "image file")
        images, labels, users = _from_npz(content, where, classes, users_allowed)
        hexdigest = hashlib.sha256(content).hexdigest()
    if source:
        require(
            len(np.unique(labels)) >= 2,
            f"{where}: a public source needs at least two classes, has {np.unique(labels).tolist()}",
        )
    return ImageSet(images, labels, users, hexdigest)
