"""fashion-shift: Debian's IDX files read and checked; a clear line where they are not installed."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix.base.errors import EXIT_BAD_INPUT, InputError
from dpaudit_mix.cli import main
from dpaudit_mix.data import fashion, registry


def idx(path: Path, magic: int, shape: tuple[int, ...], payload: bytes | None = None) -> Path:
    header = magic.to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in shape)
    body = payload if payload is not None else bytes(int(np.prod(shape)))
    path.write_bytes(gzip.compress(header + body))
    return path


def test_an_idx_file_reads_to_its_header_shape(tmp_path: Path) -> None:
    data = np.arange(2 * 28 * 28, dtype=np.uint32).astype(np.uint8)
    path = idx(tmp_path / "x.gz", fashion.IMAGES_MAGIC, (2, 28, 28), data.tobytes())
    assert np.array_equal(fashion.read_idx(path, fashion.IMAGES_MAGIC, 3), data.reshape(2, 28, 28))


@pytest.mark.parametrize(
    ("fault", "line"),
    [
        ("magic", "IDX magic 0x00000801, expected 0x00000803"),
        ("short", "data bytes, the header says"),
        ("header", "truncated IDX header"),
        ("not gzip", "not a readable gzip file"),
    ],
)
def test_a_bad_idx_file_is_one_line(tmp_path: Path, fault: str, line: str) -> None:
    path = tmp_path / "bad.gz"
    if fault == "magic":
        idx(path, fashion.LABELS_MAGIC, (2, 28, 28))
    elif fault == "short":
        idx(path, fashion.IMAGES_MAGIC, (2, 28, 28), bytes(100))
    elif fault == "header":
        path.write_bytes(gzip.compress(b"\0\0\x08"))
    else:
        path.write_bytes(b"plain bytes")
    with pytest.raises(InputError, match=line):
        fashion.read_idx(path, fashion.IMAGES_MAGIC, 3)


def test_without_the_files_fashion_shift_is_exit_2_saying_how_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DPAUDIT_MIX_FASHION_MNIST", str(tmp_path))
    assert main(["problem", "fashion-shift", "--out", str(tmp_path / "p.npz")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "dataset-fashion-mnist" in err and "make fashion-mnist" in err
    assert not (tmp_path / "p.npz").exists()


@pytest.mark.skipif(fashion.missing() is not None, reason=fashion.missing() or "")
def test_the_world_at_the_papers_scale() -> None:
    sources, sensitive = registry.world_sources("fashion-shift", 0)
    names = [s.name for s in sources]
    assert len(names) == 21 and names[-3:] == ["animals-a", "animals-b", "digits-mnist"]
    assert len(sensitive.train_labels) == 55_000 and len(sensitive.test_labels) == 10_000
    assert np.bincount(sensitive.train_labels).min() > 5_000  # every class, near-balanced
    validation = registry.world_validation("fashion-shift", 0)
    pool = {img.tobytes() for img in validation.images}
    assert not any(img.tobytes() in pool for img in sensitive.train_images[:2000])  # public ∩ sensitive = ∅
