"""The checked cache: an entry is used only under its own key, with its bytes intact."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpaudit_mix.base.cache import cached, load_npz, save_npz, sha256


def _entry(root: Path, seed: int, calls: list[int]) -> dict[str, np.ndarray]:
    def compute() -> dict[str, np.ndarray]:
        calls.append(seed)
        return {"seed": np.array([seed])}

    return cached(root / "problems" / f"world-seed{seed}.npz", compute, save_npz, load_npz)


def test_a_user_cache_entry_of_seed_1_under_seed_0s_name_is_recomputed(capsys, tmp_path: Path) -> None:
    """Probe #32: the entry and its sidecar, both copied, were used as seed 0's."""
    calls: list[int] = []
    for seed in (0, 1):
        _entry(tmp_path, seed, calls)
    folder = tmp_path / "problems"
    for suffix in ("", ".sha256"):
        (folder / f"world-seed0.npz{suffix}").write_bytes((folder / f"world-seed1.npz{suffix}").read_bytes())
    assert _entry(tmp_path, 0, calls)["seed"].tolist() == [0]
    assert calls == [0, 1, 0]
    assert "belongs to another key" in capsys.readouterr().err
    assert _entry(tmp_path, 0, calls)["seed"].tolist() == [0] and calls == [0, 1, 0]  # rewritten, reused


def test_a_changed_entry_or_an_unkeyed_sidecar_is_recomputed(capsys, tmp_path: Path) -> None:
    calls: list[int] = []
    _entry(tmp_path, 0, calls)
    path = tmp_path / "problems" / "world-seed0.npz"
    path.with_name(path.name + ".sha256").write_text(sha256(path) + "\n")  # the bytes alone, no key
    assert _entry(tmp_path, 0, calls)["seed"].tolist() == [0] and calls == [0, 0]
    save_npz(path, {"seed": np.array([7])})  # bytes changed under an old sidecar
    assert _entry(tmp_path, 0, calls)["seed"].tolist() == [0] and calls == [0, 0, 0]
    assert capsys.readouterr().err.count("recomputing") == 2
