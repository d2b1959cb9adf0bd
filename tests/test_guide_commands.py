"""The guides' shell blocks run as written, in order, from a folder that holds the shipped specs
(audits/, pipeline/, recovery/, releases/, warmsyn/), each shrunk to a small size by SMALL: the
same commands, the same flags, the same exit codes a user gets, in minutes rather than hours.
Minutes in all, so `make full` runs them (marker `guides`), not `make test`, which parses every
line (test_docs.py)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import time
import tomllib
from pathlib import Path

import pytest

from dpaudit_mix import cli
from dpaudit_mix.release import gate

from .conftest import TINY_PIPELINE
from .test_model_release import BARE

ROOT = Path(__file__).parent.parent
GUIDES = ROOT / "docs" / "guides"
SPEC_FOLDERS = ("audits", "pipeline", "recovery", "releases", "warmsyn")

_IMAGE = {k: list(v) if isinstance(v, tuple) else v for k, v in TINY_PIPELINE.items()}
_TEXT = {"epsilons": [2.0], "seeds": 1, "pretrain_windows": 300, "pretrain_epochs": 1, "finetune_steps": 2}

#: each shipped spec a guide names, at a small size: the keys that set its size (runs, seeds, a
#: grid's extent, training lengths), nothing that changes what it does.
SMALL: dict[str, dict[str, object]] = {
    "audits/default.toml": {"runs": 200, "steps": 20},
    "audits/opacus-one-run.toml": {"one_run_canaries": 400, "rho": 0.1, "sample_rate": 0.2, "steps": 10},
    "releases/default.toml": {"steps": 20, "detect": 4.0, "budget_epsilon": 10.0},
    "releases/model.toml": {"detect": 4.0, "canaries": 1000},
    "recovery/default.toml": {
        "tasks": ["digit-0"],
        "epsilons": [1.0],
        "rhos": [0.1],
        "seeds": 1,
        "steps": 20,
        "user_level_tasks": [],
        "k_values": [2, 4],
        "k_tasks": ["digit-0"],
        "k_fit_min": 2,
    },
    "pipeline/quick.toml": {**_IMAGE, "epsilons": [1.0], "finetune_epochs": 4},
    "pipeline/default.toml": {**_IMAGE, "methods": ["dpmixmin", "uniform"]},
    "pipeline/shift.toml": {**_IMAGE, "methods": ["dpmixmin", "uniform"]},
    "pipeline/premise.toml": {**_IMAGE, "pretrain_examples": 300, "methods": ["dpmixmin", "uniform"]},
    "pipeline/map.toml": {
        **_IMAGE,
        "methods": ["dpmixmin", "uniform"],
        "permuted_sources_grid": [0, 6],
        "pretrain_examples_grid": [300],
        "finetune_rows_grid": [135],
    },
    "pipeline/factorial.toml": {**_IMAGE, "methods": ["dpmixmin", "uniform"], "proxies": ["logistic"]},
    "pipeline/shakespeare-users.toml": {**_TEXT, "methods": ["dpmixmin", "uniform"]},
    "warmsyn/default.toml": {"public_size": 32, "synthetic_size": 64, "edm_steps": 20, "epsilons": [2.0], "seeds": 1},
}

#: lines CI runs as its own step, as written (4 minutes): not run twice.
OWN_STEP = {"dpaudit-mix verify-accountant --quick --self-test": "make selftest"}

#: a line's flags that set a size of their own, at the small size.
SMALLER = {"--runs 100000": "--runs 400", "--runs 2000": "--runs 400"}


def _toml(table: dict[str, object]) -> str:
    """A flat spec as TOML (its values numbers, strings, booleans or lists of them: JSON's spelling)."""
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in table.items())


def _small_specs(folder: Path) -> None:
    for name in SPEC_FOLDERS:
        shutil.copytree(ROOT / name, folder / name)
    for name, keys in SMALL.items():
        path = folder / name
        path.write_text(_toml({**tomllib.loads(path.read_text(encoding="utf-8")), **keys}), encoding="utf-8")


def _lines(page: Path) -> list[tuple[str, int]]:
    """Each ``dpaudit-mix`` line of a page's shell blocks, with the exit code its comment names
    ("exit 3 on a VIOLATION" is the code of a case; "a broken mechanism: exit 3" is this line's)."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S):
        for raw in block.replace("\\\n", " ").splitlines():
            command, _, comment = raw.partition(" #")
            if command.strip().startswith("dpaudit-mix "):
                code = re.search(r": exit (\d)", comment)
                found.append((command.strip(), int(code.group(1)) if code else 0))
    return found


PAGES = sorted(p for p in GUIDES.glob("*.md") if _lines(p))


@pytest.mark.guides
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_guides_shell_block_runs_as_written(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gate, "VERIFY_LEVEL", BARE)  # the release gate's checks, at the tests' size
    monkeypatch.setenv("DPAUDIT_MIX_LEDGER", str(tmp_path / "ledger.sqlite"))
    _small_specs(tmp_path)
    monkeypatch.chdir(tmp_path)
    scheduler, timings = None, []
    for line, expected in _lines(page):
        if line in OWN_STEP:
            continue
        for flag, small in SMALLER.items():
            line = line.replace(flag, small)
        if "tcp://host:8786" in line:
            scheduler = scheduler or _local_cluster()
            line = line.replace("tcp://host:8786", scheduler.scheduler_address)
        started = time.perf_counter()
        code = cli.main(shlex.split(line)[1:])
        err = capsys.readouterr().err
        assert code == expected, f"{page.name}: {line!r} exited {code}, not {expected}: {err[-600:]}"
        timings.append(f"{time.perf_counter() - started:7.1f} s  {line}\n")
    (tmp_path / "timings.txt").write_text("".join(timings))  # what each line took, kept with the run
    if scheduler is not None:
        scheduler.close()


def _local_cluster():  # type: ignore[no-untyped-def]
    from distributed import LocalCluster

    return LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
