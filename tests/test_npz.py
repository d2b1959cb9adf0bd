"""Arrays a user hands in: headers checked before anything is inflated, one line for every bad file."""

from __future__ import annotations

import io
import re
import resource
import struct
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix import problem as problem_io
from dpaudit_mix.audit.many_run import score_file
from dpaudit_mix.audit.many_run.score_file import read_scores
from dpaudit_mix.base import npz
from dpaudit_mix.base.cache import load_npz
from dpaudit_mix.base.errors import InputError


def bomb(path: Path, values: int, names: tuple[str, ...] = ("in_scores", "out_scores")) -> Path:
    """An .npz of zeros, deflated: ``values`` float64 per member in a file a thousand times smaller."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in names:
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                header = io.BytesIO()
                np.lib.format.write_array_header_2_0(
                    header, {"descr": "<f8", "fortran_order": False, "shape": (values,)}
                )
                member.write(header.getvalue())
                zeros, left = bytes(1 << 22), values * 8
                while left > 0:
                    member.write(zeros[: min(left, len(zeros))])
                    left -= len(zeros)
    return path


def test_a_decompression_bomb_is_refused_from_its_headers(tmp_path: Path, monkeypatch) -> None:
    """A 2 × 8 MB member in a 16 KB file is refused when memory allows less, without inflating it."""
    path = bomb(tmp_path / "bomb.npz", 1_000_000)
    assert path.stat().st_size < 40_000
    monkeypatch.setattr(npz, "available_bytes", lambda: 32 * 2**20)  # 8 MiB at 4 working copies
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    for read in (read_scores, lambda p: problem_io.load(p), lambda p: load_npz(p)):
        with pytest.raises(InputError, match=re.escape("inflates to 0.01 GiB of arrays")):
            read(path)
    assert time.perf_counter() - start < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 8 * 1024  # KiB: nothing inflated
    monkeypatch.setattr(npz, "available_bytes", lambda: 2**30)
    assert len(read_scores(path)["in_scores"]) == 1_000_000  # the same file fits a larger machine


def test_a_scores_file_is_guarded_by_the_audits_measured_working_bytes(tmp_path: Path, monkeypatch) -> None:
    """bonferroni works in 16 bytes a score, the other rules in 72 (bench/score_memory.py): a file
    the first admits, the second refuses; a float32 file also pays for its stored copy."""
    path = bomb(tmp_path / "scores.npz", 1_000_000)
    bonferroni = score_file.FIXED_WORKING_BYTES + 16 * 2_000_000
    assert score_file.working_bytes("bonferroni")(npz.headers(path.read_bytes(), "f")) == bonferroni
    single = [npz.Member("in_scores", (10,), np.dtype(np.float32))]
    assert score_file.working_bytes("split")(single) == score_file.FIXED_WORKING_BYTES + 72 * 10 + 40
    monkeypatch.setattr(npz, "available_bytes", lambda: bonferroni + 2**20)
    assert len(read_scores(path, "bonferroni")["out_scores"]) == 1_000_000
    with pytest.raises(InputError, match=re.escape("needs 0.43 GiB to work on")):
        read_scores(path, "split")


def test_a_forged_header_length_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """numpy reads the length a header states before it checks it; a 1.2 GB length is refused first."""
    path = tmp_path / "forged.npz"
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive,
        archive.open("in_scores.npy", "w", force_zip64=True) as member,
    ):
        member.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", 1_297_436_307) + bytes(1 << 20))
    with pytest.raises(InputError, match="states a 1297436307-byte header"):
        npz.load(path, "scores file")


def test_a_header_that_claims_more_than_the_cap_is_refused(tmp_path: Path) -> None:
    """A shape of 2·10⁹ float64 (16 GB) is over MAX_INFLATED_BYTES on any machine."""
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as archive, archive.open("logp.npy", "w") as member:
        np.lib.format.write_array_header_1_0(member, {"descr": "<f8", "fortran_order": False, "shape": (2 * 10**9,)})
    with pytest.raises(InputError, match=re.escape("inflates to 14.90 GiB")):
        problem_io.load(path)


@pytest.mark.parametrize(
    "write, message",
    [
        (lambda p: np.save(p.with_suffix(".npy"), np.zeros(3)) or p.with_suffix(".npy").rename(p), "a single .npy"),
        (lambda p: p.write_text("score,label\n1,1\n"), "a text file (a CSV?)"),
        (lambda p: p.write_bytes(b""), "is empty"),
        (lambda p: p.write_bytes(b"PK\x03\x04" + bytes(600)), "not an .npz archive"),
        (lambda p: np.savez(p, logp=np.array([object()], dtype=object)), "objects or records"),
        (lambda p: np.savez(p, logp=np.zeros(3, dtype=[("a", "f8")])), "objects or records"),
    ],
)
def test_every_malformed_file_is_one_input_error(tmp_path: Path, write, message: str) -> None:
    path = tmp_path / "bad.npz"
    write(path)
    with pytest.raises(InputError, match=re.escape(message)):
        npz.load(path, "problem file")


def test_a_truncated_archive_is_bad_input_not_a_machine_fault(tmp_path: Path) -> None:
    whole = tmp_path / "whole.npz"
    np.savez(whole, in_scores=np.arange(500.0), out_scores=np.arange(500.0))
    cut = tmp_path / "cut.npz"
    cut.write_bytes(whole.read_bytes()[:664])
    with pytest.raises(InputError, match=r"cut\.npz"):
        read_scores(cut)


def test_folders_and_missing_files_are_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(InputError, match="is a folder, not a file"):
        read_scores(tmp_path / "d.npz")
    with pytest.raises(InputError, match="not found"):
        read_scores(tmp_path / "none.npz")


@pytest.mark.parametrize(
    "array", [np.ones(4) * 1j, np.array(["1.0"] * 4), np.arange(4).astype("datetime64[D]"), np.ones(4, dtype=bool)]
)
def test_only_real_numbers_are_scores(tmp_path: Path, array: np.ndarray) -> None:
    path = tmp_path / "s.npz"
    np.savez(path, in_scores=array, out_scores=np.zeros(4))
    with pytest.raises(InputError, match="in_scores must hold real numbers"):
        read_scores(path)
