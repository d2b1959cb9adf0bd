"""Image sets from a user's files: an ``.npz`` (``images``, ``labels``, optional ``users``) or an
image folder (one subfolder per class, PNG or JPEG, read with Pillow).

``images`` is uint8 (0–255) or float32 in [0, 1] (what ``export-world`` writes, so that an
embedded world's files reproduce it bit for bit), of shape (N, H, W) or (N, H, W, C) with C = 1,
3 or 4. Every image becomes what the proxies and the SmallCNN take, 28 × 28 grey in [0, 1]:
RGB by ITU-R 601 luma (0.299 R + 0.587 G + 0.114 B), an alpha channel dropped, then resized
with Pillow's bilinear filter (antialiased when shrinking) unless it is 28 × 28 already (then
untouched). Conversion runs in chunks of CHUNK images, so a large source is never held twice.

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

from .. import npz
from ..errors import InputError, require

SIZE = 28
CHUNK = 4096
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
    if images.dtype == np.float32:
        require(bool(np.all(np.isfinite(images))), f"{where}: images hold NaN or inf pixels")
        require(
            float(images.min()) >= 0 and float(images.max()) <= 1,
            f"{where}: float32 images must lie in [0, 1], got [{float(images.min()):g}, {float(images.max()):g}]",
        )
    return np.concatenate([_resized(_grey(images[i : i + CHUNK], where)) for i in range(0, len(images), CHUNK)])


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
    from PIL import Image, UnidentifiedImageError

    pictures, labels, shape = [], [], None
    for label, folder in _folder_classes(root, where, classes):
        for path in sorted(p for p in folder.iterdir() if p.is_file()):
            require(path.suffix.lower() in IMAGE_SUFFIXES, f"{path}: not a PNG or JPEG image (in image folder {where})")
            content = npz.read_file(path, "image")
            digest.update(str(path.relative_to(root)).encode() + b"\0" + hashlib.sha256(content).digest())
            try:
                with Image.open(io.BytesIO(content)) as opened:
                    opened.load()
                    picture = np.asarray(opened.convert("L") if opened.mode not in ("L", "RGB", "RGBA") else opened)
            except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
                raise InputError(f"{path}: unreadable or truncated image: {exc}") from None
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
