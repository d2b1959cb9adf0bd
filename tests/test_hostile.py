"""Hostile input (issue #11): every bad spec, flag, problem file and output path ends in exit 2 with one
line on stderr, no traceback and nothing written; persisted state is checked before it is trusted."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix.audit.many_run.chunks import ChunkStore
from dpaudit_mix.audit.many_run.engine import run_audit
from dpaudit_mix.audit.spec import AuditSpec, load_spec
from dpaudit_mix.base import atomic, reporting
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.cli import EXIT_INCONCLUSIVE, main
from dpaudit_mix.problem import Problem, save
from dpaudit_mix.recovery.grid import plan
from dpaudit_mix.recovery.spec import RecoverySpec

from .conftest import random_problem

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    prob = random_problem(200, 4, seed=5, users=True)
    path = tmp_path / "p.npz"
    save(
        Problem(prob.logp, prob.sources, users=prob.users, heldout_logp=random_problem(10, 4, 6).logp, task="toy"), path
    )
    return path


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def refused(capsys, argv: list[str], message: str, workdir: Path, allowed: set[str] = frozenset()) -> None:
    """Exit 2, one line naming ``message``, no traceback, and nothing new under ``workdir``."""
    before = tree(workdir)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("dpaudit-mix: ") and "Traceback" not in err, err
    assert message in err, err
    assert tree(workdir) - before <= set(allowed), tree(workdir) - before


# --- 2, 3, 4: typed specs, every float finite -------------------------------------------------------------

QUICK = Path(__file__).parent.parent / "pipeline" / "quick.toml"
WARMSYN = Path(__file__).parent.parent / "warmsyn" / "default.toml"

AUDIT_KEYS = [
    ("runs = 2000.0", "runs = 2000.0: expected an integer"),
    ("steps = 100.0", "steps = 100.0: expected an integer"),
    ("seed = 1.5", "seed = 1.5: expected an integer >= 0"),
    ("seed = -1", "seed = -1: expected an integer >= 0"),
    ("chunk_size = 512.0", "chunk_size = 512.0: expected an integer"),
    ("epsilon = true", "epsilon = True: expected a finite number"),
    ('controls = "no"', "controls = 'no': expected true/false"),
    ("problem = 3", "problem = 3: expected a string"),
    ("clip = inf", "clip = inf: expected a finite number"),
    ("learning_rate = inf", "learning_rate = inf: expected a finite number"),
    ("confidence = nan", "confidence = nan: expected a finite number"),
    ('canaries = "natural"', "canaries = 'natural': expected a list of strings"),
    ("threats = [1]", "threats = [1]: expected a list of strings"),
    ('rho = "0.1"', "rho = '0.1': expected a finite number"),
    ('proxy = "mlp"', "proxy must be one of logistic, cnn, got 'mlp'"),
    ('problem = "shakespeare-users"\nproxy = "cnn"', "applies to the image worlds (mnist-labels, mnist-shift, fashion"),
    ("proxy_epochs = 2.5", "proxy_epochs = 2.5: expected an integer or none"),
]
RECOVERY_KEYS = [
    ("seeds = 5.0", "seeds = 5.0: expected an integer"),
    ("epsilons = [true]", "epsilons = [True]: expected a list of finite numbers"),
    ('rhos = "0.1"', "expected a list of finite numbers"),
    ("k_values = [2.5]", "k_values = [2.5]: expected a list of integers or none"),
    ("delta = inf", "delta = inf: expected a finite number"),
    ('tasks = "digit-0"', "expected a list of strings"),
    ('proxy = "cnn"\nproxy_epochs = 0', "proxy_epochs must be an integer >= 1"),
    ('problem = "p.npz"\nproxy = "cnn"', "applies to the image worlds (mnist-labels, mnist-shift, fashion"),
]
PIPELINE_KEYS = [
    ("seeds = 1.5", "seeds = 1.5: expected an integer"),
    ('methods = "dpmixmin"', "expected a list of strings"),
    ("mix_clip = inf", "mix_clip = inf: expected a finite number"),
    ("finetune_learning_rate = nan", "expected a finite number"),
    ("composition = 1", "composition = 1: expected a string"),
    ("seed = -2", "expected an integer >= 0"),
    ('proxy = "resnet"', "proxy must be one of logistic, cnn"),
    ('protocol = "per_digit"', "protocol must be one of multiclass, per_task"),
    ('proxy = "cnn"\nproxy_epochs = 0', "proxy_epochs must be an integer >= 1"),
    ("proxy_epochs = 4", "proxy_epochs applies to cnn proxies only"),
    ("proxy_epochs_grid = [1, 2]", "proxy_epochs applies to cnn proxies only"),
    ('proxy = "cnn"\nproxy_epochs_grid = [2, 0]', "proxy_epochs must be an integer >= 1"),
    ('proxies = ["cnn", "vit"]', "proxy must be one of logistic, cnn, got 'vit'"),
    ('protocols = ["per_task", "joint"]', "protocol must be one of"),
    ("protocols = []", "protocols is empty"),
    ("proxy_epochs_grid = []", "proxy_epochs_grid is empty"),
    ("rhos = []", "rhos is empty"),
    ("rhos = [0.1, 1.0]", "every rho in rhos must be in (0, 1), got 1.0"),
    ("rhos = [0.0]", "every rho in rhos must be in (0, 1)"),
]
#: the text pipeline (the same command, chosen by world = "shakespeare-users").
TEXT_PIPELINE_KEYS = [
    ("finetune_steps = 2.5", "finetune_steps = 2.5: expected an integer"),
    ("finetune_users = 0", "finetune_users must be > 0"),
    ("finetune_clip = inf", "finetune_clip = inf: expected a finite number"),
    ('methods = ["warm"]', "unknown method(s) warm for the text pipeline"),
    ("finetune_batch = 64", "unknown key(s) in"),
    ("rho = 0.001", "leaves a split empty"),
    ('protocol = "per_task"', "the text world has one task (lm)"),
    ('proxy = "cnn"', "unknown key(s) in"),
    ("rhos = []", "rhos is empty"),
    ("rhos = [0.2, 1.5]", "every rho in rhos must be in (0, 1), got 1.5"),
    ("rhos = [0.2, 0.001]", "leaves a split empty"),
]
RELEASE_KEYS = [
    ("audit_runs = 20000.0", "audit_runs = 20000.0: expected an integer"),
    ('user_level = "yes"', "user_level = 'yes': expected true/false"),
    ("budget_epsilon = inf", "budget_epsilon = inf: expected a finite number or none"),
    ("seed = -3", "expected an integer >= 0"),
]


WARMSYN_KEYS = [
    ("seeds = 2.0", "seeds = 2.0: expected an integer"),
    ("epsilons = [inf]", "epsilons = [inf]: expected a list of finite numbers"),
    ('world = "mars"', "unknown problem 'mars'"),
    ("public_size = 400", "public_size must be in [1, 250]"),
]


@pytest.mark.parametrize(
    "command, line, message",
    [("audit", *case) for case in AUDIT_KEYS]
    + [("recovery", *case) for case in RECOVERY_KEYS]
    + [("pipeline", *case) for case in PIPELINE_KEYS]
    + [("pipeline", 'world = "shakespeare-users"\n' + line, message) for line, message in TEXT_PIPELINE_KEYS]
    + [("release", *case) for case in RELEASE_KEYS]
    + [("warmsyn", *case) for case in WARMSYN_KEYS],
)
def test_wrong_types_in_every_spec(capsys, tmp_path: Path, command: str, line: str, message: str) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(line + "\n")
    # The release gate keeps a record of every refusal (refused.json); nothing else may appear.
    refused(
        capsys,
        [command, str(spec), "--out", str(tmp_path / "out")],
        message,
        tmp_path,
        allowed={"out", "out/refused.json"} if command == "release" else set(),
    )


def test_pipeline_epsilon_too_small_fails_before_any_cache(capsys, tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'epsilons = [1e-7]\nmethods = ["dpmixmin"]\nseeds = 1\nsensitive_fraction = 0.25\npublic_fraction = 0.25\n'
    )
    refused(capsys, ["pipeline", str(spec), "--out", str(tmp_path / "out")], "out of reach for the finetune", tmp_path)


def flags(problem_file: Path, tmp_path: Path) -> list[tuple[list[str], str]]:
    p = str(problem_file)
    audit = tmp_path / "a.toml"
    audit.write_text(f'problem = "{p}"\nruns = 8\n')
    a = str(audit)
    return [
        (["mix", "--problem", p, "--epsilon", "1", "--delta", "1e-5", "--clip", "inf"], "expected a finite number"),
        (["mix", "--problem", p, "--epsilon", "1", "--delta", "1e-5", "--clip", "nan"], "expected a finite number"),
        (["mix", "--problem", p, "--epsilon", "inf", "--delta", "1e-5"], "expected a finite number"),
        (["mix", "--problem", p, "--epsilon", "1", "--delta", "1e-5", "--seed", "-1"], "--seed: must be >= 0"),
        (["mix", "--problem", p, "--epsilon", "1", "--delta", "1e-5", "--steps", "1.5"], "expected an integer"),
        (["mix", "--problem", p, "--epsilon", "1", "--delta", "1e-5", "--runs", "0"], "must be >= 1"),
        (["mix", "--problem", p, "--epsilon", "1", "--delta", "1e-5", "--sample-rate", "2"], "sample rate"),
        (["mix", "--problem", p, "--epsilon", "1", "--delta", "1e-5", "--runs", "1000000000000"], "GiB of memory"),
        (
            ["account", "--noise-multiplier", "inf", "--sample-rate", "1", "--steps", "10", "--delta", "1e-5"],
            "expected a finite number",
        ),
        (
            ["account", "--noise-multiplier", "1e300", "--sample-rate", "1", "--steps", "10", "--delta", "1e-5"],
            "noise multiplier must be in (0, 1e+06]",
        ),
        (
            ["account", "--noise-multiplier", "-1", "--sample-rate", "1", "--steps", "10", "--delta", "1e-5"],
            "noise multiplier must be in",
        ),
        (
            ["account", "--noise-multiplier", "1", "--sample-rate", "nan", "--steps", "10", "--delta", "1e-5"],
            "expected a finite number",
        ),
        (
            ["calibrate", "--epsilon", "1e-6", "--delta", "1e-10", "--sample-rate", "1", "--steps", "10"],
            "above the largest accepted",
        ),
        (
            ["calibrate", "--epsilon", "1", "--delta", "inf", "--sample-rate", "1", "--steps", "10"],
            "expected a finite number",
        ),
        (["audit", a, "--noise-multiplier", "inf"], "expected a finite number"),
        (["audit", a, "--noise-multiplier", "-1"], "noise multiplier must be >= 0"),
        (["audit", a, "--runs", "1e9"], "expected an integer"),
        (["audit", a, "--runs", "1000000000000"], "GiB of memory"),
        (["audit", a, "--epsilon", "nan"], "expected a finite number"),
        (["release", a, "--noise-multiplier", "inf"], "expected a finite number"),
        (
            ["bound", "--fp", "-1", "--fn", "0", "--negatives", "10", "--positives", "10", "--delta", "1e-5"],
            "must be >= 0",
        ),
        (
            [
                "bound",
                "--fp",
                "0",
                "--fn",
                "0",
                "--negatives",
                "10",
                "--positives",
                "10",
                "--delta",
                "1e-5",
                "--confidence",
                "nan",
            ],
            "expected a finite number",
        ),
        (
            [
                "bound",
                "--fp",
                "0",
                "--fn",
                "0",
                "--negatives",
                "10",
                "--positives",
                "10",
                "--delta",
                "1e-5",
                "--claimed-mu",
                "inf",
            ],
            "expected a finite number",
        ),
        (["problem", "mnist", "--seed", "-1", "--out", str(tmp_path / "x.npz")], "--seed: must be >= 0"),
    ]


def test_every_cli_number_is_finite_and_in_range(capsys, tmp_path: Path, problem_file: Path) -> None:
    cases = flags(problem_file, tmp_path)
    for argv, message in cases:
        refused(capsys, [*argv, *(["--out", str(tmp_path / "out")] if argv[0] == "audit" else [])], message, tmp_path)
    assert len(cases) == 24


# --- 5: problem-file dtypes --------------------------------------------------------------------------------


def bad_problems(folder: Path) -> list[tuple[Path, str]]:
    good = {"logp": np.log(np.full((5, 2), 0.5)), "sources": np.array(["a", "b"])}
    cases = {
        "strings": ({**good, "logp": np.array([["a", "b"]] * 5)}, "must hold real numbers, got dtype <U1"),
        "bool": ({**good, "logp": np.zeros((5, 2), bool)}, "must hold real numbers, got dtype bool"),
        "complex": ({**good, "logp": good["logp"] + 0j}, "must hold real numbers, got dtype complex128"),
        "users_float": ({**good, "users": np.zeros(5)}, "'users' must be integer ids"),
        "held_strings": ({**good, "heldout_logp": np.array([["x", "y"]])}, "'heldout_logp' must hold real numbers"),
        "held_users_float": (
            {**good, "heldout_logp": good["logp"][:2], "heldout_users": np.zeros(2)},
            "'heldout_users' must be integer ids",
        ),
        "held_users_short": (
            {**good, "heldout_logp": good["logp"][:2], "heldout_users": np.zeros(3, int)},
            "heldout_users must have one id per row (2)",
        ),
        "nan": ({**good, "logp": np.full((5, 2), np.nan)}, "NaN or infinite"),
        "one_d": ({**good, "logp": np.zeros(5)}, "2-D array"),
        "no_sources": ({"logp": good["logp"]}, "lacks the required array 'sources'"),
    }
    out = []
    for name, (arrays, message) in cases.items():
        path = folder / f"{name}.npz"
        np.savez(path, **arrays)
        out.append((path, message))
    npy = folder / "renamed.npz"
    np.save(folder / "renamed.npy", good["logp"])
    (folder / "renamed.npy").rename(npy)
    out.append((npy, "a single .npy array (np.save), not an .npz archive"))
    truncated = folder / "truncated.npz"
    truncated.write_bytes((folder / "bool.npz").read_bytes()[:40])
    out.append((truncated, "is not an .npz archive (no zip directory)"))
    empty = folder / "empty.npz"
    empty.write_bytes(b"")
    out.append((empty, "is empty"))
    return out


def test_problem_files_of_every_wrong_kind(capsys, tmp_path: Path) -> None:
    cases = bad_problems(tmp_path)
    for path, message in cases:
        refused(capsys, ["mix", "--problem", str(path), "--nonprivate"], message, tmp_path)
    assert len(cases) == 13


# --- 6: output paths ---------------------------------------------------------------------------------------


def test_output_paths_fail_before_any_work(capsys, tmp_path: Path, problem_file: Path) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    a_dir = tmp_path / "a_dir"
    a_dir.mkdir()
    spec = tmp_path / "a.toml"
    spec.write_text(f'problem = "{problem_file}"\nruns = 8\n')
    empty = tmp_path / "defaults.toml"  # every key default: valid for recovery and release
    empty.write_text("")
    mix = ["mix", "--problem", str(problem_file), "--nonprivate", "--out"]
    cases = [
        ([*mix, str(a_dir)], "exists and is a folder"),
        ([*mix, str(a_file / "x.json")], "is a file, not a folder"),
        (["problem", "mnist", "--out", str(a_dir)], "exists and is a folder"),
        (["audit", str(spec), "--out", str(a_file)], "exists and is a file"),
        (["audit", str(spec), "--out", str(a_file / "deeper" / "out")], "is a file, not a folder"),
        (["recovery", str(empty), "--out", str(a_file)], "exists and is a file"),
        (["verify-accountant", "--quick", "--out", str(a_file / "v")], "is a file, not a folder"),
        (["release", str(empty), "--out", str(a_file)], "exists and is a file"),
    ]
    for argv, message in cases:
        refused(capsys, argv, message, tmp_path)


def test_backends_are_checked_before_anything_is_written(
    capsys, monkeypatch, tmp_path: Path, problem_file: Path
) -> None:
    from dpaudit_mix.base import backend

    monkeypatch.setattr(backend, "CONNECT_TIMEOUT_S", 1)
    audit = tmp_path / "a.toml"
    audit.write_text(f'problem = "{problem_file}"\nruns = 8\n')
    recovery = tmp_path / "defaults.toml"
    recovery.write_text("")
    out = ["--out", str(tmp_path / "out")]
    nowhere = ["--backend", "dask", "--scheduler", "tcp://127.0.0.1:1"]
    cases = [
        (["pipeline", str(QUICK), *nowhere, *out], "cannot reach the Dask scheduler at tcp://127.0.0.1:1"),
        (["recovery", str(recovery), *nowhere, *out], "cannot reach the Dask scheduler"),
        (["audit", str(audit), *nowhere, *out], "cannot reach the Dask scheduler"),
        (["pipeline", str(QUICK), "--backend", "dask", *out], "--backend dask needs --scheduler ADDR"),
        (["recovery", str(recovery), "--scheduler", "tcp://127.0.0.1:1", *out], "--scheduler needs --backend dask"),
        (["audit", str(audit), "--scheduler", "tcp://127.0.0.1:1", *out], "--scheduler needs --backend dask"),
    ]
    for argv, message in cases:
        refused(capsys, argv, message, tmp_path)


@pytest.fixture
def mute_listeners() -> Iterator[dict[str, str]]:
    """An HTTP server and a listener that accepts and never answers, on free local ports."""
    import http.server
    import socket
    import threading

    silent = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except TimeoutError:
                continue

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threads = [threading.Thread(target=accept, daemon=True), threading.Thread(target=web.serve_forever, daemon=True)]
    for thread in threads:
        thread.start()
    yield {"silent": f"tcp://127.0.0.1:{silent.getsockname()[1]}", "http": f"tcp://127.0.0.1:{web.server_port}"}
    stop.set()
    web.shutdown()
    for thread in threads:
        thread.join()
    for sock in (*held, silent):
        sock.close()


def test_a_listener_that_is_no_dask_scheduler_is_refused_by_the_deadline(
    capsys, monkeypatch, mute_listeners: dict[str, str], tmp_path: Path
) -> None:
    """Probe #32: an HTTP server or a silent listener held the Dask connect for 90-600 s (the
    handshake read had no deadline); now exit 2 once the connect deadline passes."""
    import time

    from dpaudit_mix.base import backend

    monkeypatch.setattr(backend, "CONNECT_TIMEOUT_S", 2)
    recovery = tmp_path / "defaults.toml"
    recovery.write_text("")
    for kind, address in mute_listeners.items():
        start = time.monotonic()
        argv = ["recovery", str(recovery), "--backend", "dask", "--scheduler", address, "--out", str(tmp_path / kind)]
        refused(capsys, argv, "cannot reach the Dask scheduler", tmp_path)
        assert time.monotonic() - start < backend.CONNECT_TIMEOUT_S + 3, kind


def test_cuda_without_a_gpu_is_refused_before_any_work(capsys, monkeypatch, tmp_path: Path) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = tmp_path / "gpu.toml"
    spec.write_text('device = "cuda"\n')
    out = ["--out", str(tmp_path / "out")]
    for argv in (
        ["pipeline", str(QUICK), "--device", "cuda", *out],
        ["pipeline", str(spec), *out],
        ["warmsyn", str(tmp_path / "gpu.toml"), *out],
        ["warmsyn", str(WARMSYN), "--device", "cuda", *out],
    ):
        refused(capsys, argv, "device cuda: torch sees no CUDA GPU on this machine", tmp_path)
    spec.write_text('device = "tpu"\n')
    refused(capsys, ["pipeline", str(spec), *out], "device must be one of cpu, cuda, auto, got 'tpu'", tmp_path)


@pytest.mark.skipif(AS_ROOT, reason="root may write anywhere")
def test_unwritable_output_folder(capsys, tmp_path: Path, problem_file: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        refused(
            capsys,
            ["mix", "--problem", str(problem_file), "--nonprivate", "--out", str(locked / "x.json")],
            "is not writable",
            tmp_path,
        )
    finally:
        locked.chmod(stat.S_IRWXU)


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs a /proc file system")
def test_a_folder_that_refuses_entries_is_caught_even_as_root(capsys, tmp_path: Path) -> None:
    """Permission bits pass for root on /proc; the check tries to create an entry instead. Before,
    the text pipeline ran minutes on an unwritable cache and died reading it back."""
    spec = tmp_path / "text.toml"
    spec.write_text('world = "shakespeare-users"\n')
    refused(capsys, ["pipeline", str(spec), "--out", "/proc/dpaudit-mix-out"], "refuses new entries", tmp_path)


# --- 3: an audit that cannot see is never a pass -----------------------------------------------------------


def test_blind_controls_make_the_audit_inconclusive(capsys, tmp_path: Path, problem_file: Path) -> None:
    spec = tmp_path / "spec.toml"
    # 8 runs: even a σ = 0 control, perfectly separated, cannot certify more than ε = 1 at 95%.
    spec.write_text(f'problem = "{problem_file}"\nruns = 8\nsteps = 5\ncanaries = ["max_clip"]\n')
    out = tmp_path / "out"
    assert main(["audit", str(spec), "--out", str(out)]) == EXIT_INCONCLUSIVE
    err = capsys.readouterr().err
    assert "INCONCLUSIVE" in err
    summary = json.loads((out / "audit.json").read_text())
    assert summary["inconclusive"] and not summary["violation"]
    assert set(summary["blind_controls"]) == {"max_clip/black_box", "max_clip/white_box"}
    assert "INCONCLUSIVE" in (out / "report.md").read_text()


# --- 12: persisted chunks are checked, owned and locked ----------------------------------------------------


def audit_spec(tmp_path: Path, problem_file: Path, seed: int = 0) -> Path:
    spec = tmp_path / f"spec{seed}.toml"
    spec.write_text(
        f'problem = "{problem_file}"\nruns = 256\nchunk_size = 64\nsteps = 5\nseed = {seed}\n'
        'canaries = ["max_clip"]\ncontrols = false\n'
    )
    return spec


def test_damaged_swapped_and_foreign_chunks_are_recomputed(capsys, tmp_path: Path, problem_file: Path) -> None:
    spec = load_spec(audit_spec(tmp_path, problem_file))
    out = tmp_path / "out"
    reference = run_audit(spec, out, progress=False).summary
    chunks = sorted((out / "chunks").glob("*.npz"))
    assert len(chunks) == 4
    chunks[0].write_bytes(chunks[0].read_bytes()[:100])  # truncated
    chunks[1].write_bytes(b"")  # emptied
    third, fourth = chunks[2].read_bytes(), chunks[3].read_bytes()
    chunks[2].write_bytes(fourth)  # swapped
    chunks[3].write_bytes(third)
    capsys.readouterr()
    assert run_audit(spec, out, progress=False).summary == reference
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "recomputed" in err and all(c.name in err for c in chunks)
    # A corrupt manifest: every chunk is recomputed, the result is the same.
    (out / "chunks" / "manifest.jsonl").write_text("{not json\n")
    assert run_audit(spec, out, progress=False).summary == reference
    # Another audit's chunks in the same folder are never mixed in.
    other = load_spec(audit_spec(tmp_path, problem_file, seed=1))
    other_reference = run_audit(other, tmp_path / "other", progress=False).summary
    assert run_audit(other, out, progress=False).summary == other_reference
    assert run_audit(spec, out, progress=False).summary == reference


def test_a_second_live_audit_on_the_same_folder_is_refused(tmp_path: Path, problem_file: Path) -> None:
    spec = load_spec(audit_spec(tmp_path, problem_file))
    with (
        ChunkStore(tmp_path / "out", "someone-else", ("black_box",)),
        pytest.raises(InputError, match="another audit is running"),
    ):
        run_audit(spec, tmp_path / "out", progress=False)


# --- 9, 10, 12: defaults that fit, file modes, stale figures -----------------------------------------------


def test_recovery_defaults_fit_a_problem_file(problem_file: Path) -> None:
    spec = plan(RecoverySpec(problem=str(problem_file))).spec
    assert spec.user_level_tasks == ("toy",) and spec.k_tasks == ("toy",) and spec.k_values == (2, 4)


def test_outputs_respect_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic.write_json(tmp_path / "a.json", {"x": 1})
        os.umask(0o077)
        atomic.write_json(tmp_path / "b.json", {"x": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o600


def test_a_rerun_removes_the_figures_it_no_longer_shows(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    first = reporting.save_figure(plt.figure(), tmp_path / "old.png")
    reporting.write_pages(tmp_path, "t", [("figure", first)])
    second = reporting.save_figure(plt.figure(), tmp_path / "new.png")
    reporting.write_pages(tmp_path, "t", [("figure", second)])
    assert not first.exists() and second.exists()
    assert "old.png" not in (tmp_path / "report.md").read_text()


def test_a_non_finite_lambda_is_an_error_for_every_caller(monkeypatch, small_problem: Problem) -> None:
    from dpaudit_mix import learner

    real = learner._fit_block

    def overflowing(*args, **kwargs):
        weights, scores = real(*args, **kwargs)
        return np.full_like(weights, np.nan), scores

    monkeypatch.setattr(learner, "_fit_block", overflowing)
    with pytest.raises(InputError, match="non-finite λ"):
        learner.fit(small_problem, learner.LearnerConfig(noise_multiplier=1.0, steps=3), 4, stream(0, "learner-noise"))


def test_a_user_level_audit_of_regrouped_users_never_reuses_chunks(tmp_path: Path) -> None:
    """Same logp, other user ids: a different mechanism (other units, other clipping), so the
    audit id differs and the chunks of the first grouping are not mixed in."""
    first = random_problem(240, 4, seed=9, users=True)
    regrouped = replace(first, users=(np.arange(240) // 6).astype(np.int64))
    spec = AuditSpec(
        user_level=True, rho=1.0, steps=10, runs=128, chunk_size=64, canaries=("max_clip",), controls=False
    )
    run_audit(spec, tmp_path / "out", progress=False, problem=first)
    fresh = run_audit(spec, tmp_path / "fresh", progress=False, problem=regrouped).summary
    assert run_audit(spec, tmp_path / "out", progress=False, problem=regrouped).summary == fresh


def test_an_audit_deletes_only_what_it_wrote_and_never_through_a_symlink(
    capsys, tmp_path: Path, problem_file: Path
) -> None:
    """A user's .npz in DIR/chunks survives a fresh audit there; DIR/chunks as a symlink is
    refused (nothing in its target touched); a forged figure record cannot make a rerun delete a
    file outside DIR; a rerun without controls removes the last run's control scores. (What an
    audit writes does not depend on its problem: a small file's audits take a second.)"""
    spec = tmp_path / "a.toml"
    spec.write_text(f'problem = "{problem_file}"\nsteps = 10\nruns = 128\nchunk_size = 64\ncanaries = ["max_clip"]\n')
    out = tmp_path / "out"
    (out / "chunks").mkdir(parents=True)
    mine = out / "chunks" / "mine.npz"
    np.savez(mine, x=np.arange(3))
    assert main(["audit", str(spec), "--out", str(out)]) in (0, 4)
    assert mine.is_file() and len(list((out / "scores").glob("*control.npz"))) == 2
    outside = tmp_path / "keep"
    outside.mkdir()
    (outside / "precious.npz").write_bytes(b"user data")
    (out / ".report.owned").write_text(f"{'0' * 64} ../keep/precious.npz\n")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "chunks").symlink_to(outside)
    assert main(["audit", str(spec), "--out", str(linked)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    spec.write_text(spec.read_text() + "controls = false\n")
    assert main(["audit", str(spec), "--out", str(out)]) == 0
    assert (outside / "precious.npz").read_bytes() == b"user data" and mine.is_file()
    assert list((out / "scores").glob("*control.npz")) == []


def test_a_fifo_under_the_lock_s_name_does_not_hang_an_audit(tmp_path: Path, problem_file: Path) -> None:
    """The lock file is opened before any work to see whether another command holds it: a FIFO
    planted under its name must not block that open (it would wait for a writer forever)."""
    import os
    import subprocess
    import sys

    spec = tmp_path / "a.toml"
    spec.write_text(f'problem = "{problem_file}"\nsteps = 5\nruns = 64\ncanaries = ["max_clip"]\n')
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / ".dpaudit-mix.lock")
    done = subprocess.run(
        [sys.executable, "-m", "dpaudit_mix.cli", "audit", str(spec), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 4), done.stderr


def test_a_second_command_on_a_folder_in_use_is_refused(capsys, tmp_path: Path) -> None:
    from dpaudit_mix.base import owned

    spec = tmp_path / "a.toml"
    spec.write_text('problem = "mnist"\nrho = 0.05\nsteps = 10\nruns = 128\ncanaries = ["max_clip"]\n')
    out = tmp_path / "out"
    cache = tmp_path / "cache"  # the second command's own: it must be refused before it builds mnist
    with owned.folder_lock(out, "audit"):  # as a first audit would hold it, from another process
        import os
        import subprocess
        import sys

        second = subprocess.run(
            [sys.executable, "-m", "dpaudit_mix.cli", "audit", str(spec), "--out", str(out)],
            capture_output=True,
            text=True,
            env={**os.environ, "DPAUDIT_MIX_CACHE": str(cache)},
        )
    assert second.returncode == 2 and "another dpaudit-mix command is writing" in second.stderr
    assert not (out / "audit.json").exists() and not cache.exists()
