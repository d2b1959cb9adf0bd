"""Calibrations remembered on disk (calibrations.py): a rerun confirms its σ with two accountant
calls; a hint the accountant does not confirm (forged, stale) is calibrated afresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpaudit_mix import accounting
from dpaudit_mix.base import calibrations
from dpaudit_mix.models import cnn

REQUEST = (1.0, 1e-5, 0.1, 50)  # ε, δ, q, T


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DPAUDIT_MIX_CACHE", str(tmp_path))
    accounting.clear_caches()
    cnn.opacus_sigma.cache_clear()


def _counted(monkeypatch) -> list[int]:
    """The accountant's answers, by the number asked at once (each in a bounded child)."""
    calls: list[int] = []
    real = accounting.libraries.library_epsilons

    def counting(requests):
        calls.append(len(requests))
        return real(requests)

    monkeypatch.setattr(accounting.libraries, "library_epsilons", counting)
    return calls


def _hint_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "calibrations").glob("*.json"))


def test_a_rerun_confirms_its_remembered_sigma_with_two_accountant_calls(monkeypatch, tmp_path: Path) -> None:
    """…asked side by side: σ within the target, and σ one tolerance smaller over it."""
    calls = _counted(monkeypatch)
    sigma = accounting.calibrate(*REQUEST)
    fresh = sum(calls)
    assert fresh > 2 and len(_hint_files(tmp_path)) == 1  # a search: more than a confirmation's two
    accounting.clear_caches()  # a new process
    calls.clear()
    assert accounting.calibrate(*REQUEST) == sigma
    assert calls == [2]


@pytest.mark.parametrize("factor", [0.5, 0.99, 1.5])
def test_a_hint_the_accountant_does_not_confirm_is_calibrated_afresh(tmp_path: Path, factor: float) -> None:
    """Too small (the claim would be broken), a hair too small, or not minimal: never used."""
    sigma = accounting.calibrate(*REQUEST)
    (path,) = _hint_files(tmp_path)
    path.write_text(json.dumps({"noise_multiplier": sigma * factor}))
    accounting.answers.SIGMAS.clear()  # σ forgotten; the accountant's answers kept
    again = accounting.calibrate(*REQUEST)
    assert again == sigma and accounting.epsilon([accounting.GaussianPhase(again, 0.1, 50)], 1e-5) <= 1.0
    assert json.loads(path.read_text())["noise_multiplier"] == sigma  # the bad hint was replaced


@pytest.mark.parametrize("content", ["not json", '{"noise_multiplier": "1.0"}', '{"noise_multiplier": -1.0}', "[]"])
def test_an_unreadable_hint_is_ignored(tmp_path: Path, content: str) -> None:
    sigma = accounting.calibrate(*REQUEST)
    (path,) = _hint_files(tmp_path)
    path.write_text(content)
    accounting.answers.SIGMAS.clear()
    assert accounting.calibrate(*REQUEST) == sigma


def test_opacus_calibration_is_remembered_and_a_forged_hint_refused(tmp_path: Path) -> None:
    sigma = cnn.opacus_sigma(2.0, 1e-5, 0.25, 2)
    (path,) = _hint_files(tmp_path)
    cnn.opacus_sigma.cache_clear()
    assert cnn.opacus_sigma(2.0, 1e-5, 0.25, 2) == sigma  # confirmed by Opacus' PRV accountant
    path.write_text(json.dumps({"noise_multiplier": sigma / 2}))
    cnn.opacus_sigma.cache_clear()
    assert cnn.opacus_sigma(2.0, 1e-5, 0.25, 2) == sigma


def test_another_library_version_calibrates_afresh(monkeypatch, tmp_path: Path) -> None:
    """A hint stands for the libraries that computed it: after an upgrade it is not even asked."""
    accounting.calibrate(*REQUEST)
    accounting.clear_caches()  # a new process
    upgraded = {**calibrations.versions(calibrations.LIBRARIES), "dp-accounting": "99.0"}
    monkeypatch.setattr(calibrations, "versions", lambda names: upgraded)
    calls = _counted(monkeypatch)
    accounting.calibrate(*REQUEST)
    # a search, one σ at a time: never the confirmation's two σ asked at once
    assert len(calls) > 2 and set(calls) == {1} and len(_hint_files(tmp_path)) == 2
