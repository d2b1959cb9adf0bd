"""The issue's hostile and fault findings, probed from outside through the CLI, counted by class.

Runs each case as a user would (fresh processes, real files) against the package importable from
the current folder, so the same script counts a checkout before and after a change:

    .venv/bin/python bench/hostile_probe.py                  # this checkout (about 10 minutes)
    cd /tmp/old && /work/main/.venv/bin/python /work/main/bench/hostile_probe.py   # another one

A case passes when the command does what the issue asks: the documented exit code, at most one
line on stderr and no traceback, and nothing destroyed or wrongly kept. Needs root for the tmpfs
(a full disk).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dpaudit_mix.problem import Problem, save

CASES: list[tuple[str, str, Callable[[Path], bool]]] = []


def case(group: str, name: str) -> Callable[[Callable[[Path], bool]], Callable[[Path], bool]]:
    def register(check: Callable[[Path], bool]) -> Callable[[Path], bool]:
        CASES.append((group, name, check))
        return check

    return register


def cli(*argv: str, env: dict[str, str] | None = None, timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dpaudit_mix.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kwargs,
    )


def one_line(done: subprocess.CompletedProcess, code: int) -> bool:
    return done.returncode == code and "Traceback" not in done.stderr and done.stderr.count("\n") <= 1


def problem(root: Path, name: str = "p.npz", extra: bool = False) -> Path:
    rng = np.random.Generator(np.random.PCG64(7))  # a fixed synthetic problem for the drill
    path = root / name
    save(
        Problem(
            np.log(rng.beta(2.0, 1.0, size=(60, 4))),
            tuple(f"s{i}" for i in range(4)),
            heldout_logp=np.log(rng.beta(2.0, 1.0, size=(10, 4))),
            task="t",
            meta={"extra": "an unrelated array"} if extra else {},
        ),
        path,
    )
    return path


def release_spec(root: Path, name: str, prob: Path, **keys: object) -> Path:
    body = {"problem": str(prob), "epsilon": 1.0, "steps": 10, "audit_runs": 1000, "chunk_size": 1024, **keys}
    path = root / name
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in body.items()))
    return path


# --- budget bypasses ----------------------------------------------------------------------------


@case("budget bypass", "a deleted ledger reads as nothing spent")
def _deleted(root: Path) -> bool:
    prob = problem(root)
    spec = release_spec(root, "s.toml", prob, budget_epsilon=1.2, ledger=str(root / "ledger.json"))
    cli("release", spec, "--out", root / "a")
    (root / "ledger.json").unlink()
    return cli("release", spec, "--out", root / "b").returncode != 0 and not (root / "b" / "release.json").exists()


@case("budget bypass", "an emptied ledger reads as nothing spent")
def _emptied(root: Path) -> bool:
    prob = problem(root)
    spec = release_spec(root, "s.toml", prob, budget_epsilon=1.2, ledger=str(root / "ledger.json"))
    cli("release", spec, "--out", root / "a")
    (root / "ledger.json").write_text('{"releases": []}')
    done = cli("release", spec, "--out", root / "b")
    return done.returncode != 0 and not (root / "b" / "release.json").exists()


@case("budget bypass", "without a ledger key each --out folder gets a fresh budget")
def _per_out(root: Path) -> bool:
    prob = problem(root)
    env = {**os.environ, "XDG_STATE_HOME": str(root / "state"), "DPAUDIT_MIX_LEDGER": ""}
    spec = release_spec(root, "s.toml", prob, budget_epsilon=1.2)
    cli("release", spec, "--out", root / "x" / "a", env=env)
    return cli("release", spec, "--out", root / "y" / "b", env=env).returncode == 3


@case("budget bypass", "an unrelated array in the problem file gives a fresh budget")
def _extra_array(root: Path) -> bool:
    book = str(root / "ledger.json")
    cli("release", release_spec(root, "a.toml", problem(root), budget_epsilon=1.2, ledger=book), "--out", root / "a")
    other = release_spec(root, "b.toml", problem(root, "q.npz", extra=True), budget_epsilon=1.2, ledger=book)
    return cli("release", other, "--out", root / "b").returncode == 3


@case("budget bypass", "a symlinked ledger is replaced by a regular file")
def _symlink(root: Path) -> bool:
    shared = root / "shared.json"
    link = root / "mine.json"
    link.symlink_to(shared)
    cli("release", release_spec(root, "s.toml", problem(root), ledger=str(link)), "--out", root / "a")
    return link.is_symlink() and shared.is_file() and len(json.loads(shared.read_text())["releases"]) == 1


# --- data loss ----------------------------------------------------------------------------------


@case("data loss", "release deletes a published release before reading its spec")
def _published(root: Path) -> bool:
    book = str(root / "ledger.json")
    cli("release", release_spec(root, "s.toml", problem(root), ledger=book), "--out", root / "a")
    before = (root / "a" / "release.json").read_bytes()
    done = cli("release", root / "typo.toml", "--out", root / "a")
    return one_line(done, 2) and (root / "a" / "release.json").read_bytes() == before


@case("data loss", "mix --out overwrites its own problem file")
def _own_problem(root: Path) -> bool:
    prob = problem(root)
    before = prob.read_bytes()
    done = cli("mix", "--problem", prob, "--nonprivate", "--out", prob)
    return one_line(done, 2) and prob.read_bytes() == before


@case("data loss", "--out on a FIFO replaces it with a regular file")
def _fifo(root: Path) -> bool:
    fifo = root / "fifo"
    os.mkfifo(fifo)
    done = cli("mix", "--problem", problem(root), "--nonprivate", "--out", fifo, timeout=60)
    return one_line(done, 2) and fifo.is_fifo()


# --- hangs --------------------------------------------------------------------------------------


@case("hang", "calibrate --sample-rate 1e-9 runs for minutes")
def _calibrate(root: Path) -> bool:
    start = time.monotonic()
    try:
        done = cli(
            "calibrate", "--epsilon", "1", "--delta", "1e-5", "--sample-rate", "1e-9", "--steps", "100", timeout=240
        )
    except subprocess.TimeoutExpired:
        return False
    return one_line(done, 2) and time.monotonic() - start < 240


# --- tracebacks instead of one line ---------------------------------------------------------------


@case("traceback", "a full disk (mix --out on a 64 KiB tmpfs)")
def _full(root: Path) -> bool:
    disk = root / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        done = cli(
            "mix",
            "--problem",
            problem(root),
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--runs",
            "5000",
            "--seed",
            "1",
            "--out",
            disk / "w.json",
        )
        return done.returncode not in (0, 1) and "Traceback" not in done.stderr and not (disk / "w.json").exists()
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@case("traceback", "Ctrl-C during an audit")
def _ctrl_c(root: Path) -> bool:
    prob = problem(root)
    spec = root / "a.toml"
    spec.write_text(f'problem = "{prob}"\nruns = 200000\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpaudit_mix.cli", "audit", str(spec), "--out", str(root / "o")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(8)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate()[1]
    return proc.returncode == 130 and "Traceback" not in err


def _release_on_ledger(root: Path, content: str) -> bool:
    """A release on a ledger holding ``content``: one line, exit 2."""
    (root / "ledger.json").write_text(content)
    done = cli(
        "release", release_spec(root, "s.toml", problem(root), ledger=str(root / "ledger.json")), "--out", root / "a"
    )
    return one_line(done, 2)


case("traceback", 'a malformed ledger entry ({"releases": [1]})')(
    lambda root: _release_on_ledger(root, '{"releases": [1]}')
)
case("traceback", "a ledger entry missing a key")(
    lambda root: _release_on_ledger(root, '{"releases": [{"epsilon": 1.0}]}')
)


def _forged(root: Path, edit: Callable[[dict], None]) -> Path:
    """An honest manifest (made once, with its problem file kept beside it), edited and re-digested
    the way a forger would."""
    kept = Path(tempfile.gettempdir()) / f"dpaudit-probe-release-{os.getpid()}"
    made = kept / "r" / "release.json"
    if not made.exists():
        kept.mkdir(exist_ok=True)
        cli(
            "release",
            release_spec(kept, "s.toml", problem(kept), ledger=str(kept / "ledger.json")),
            "--out",
            made.parent,
        )
    manifest = json.loads(made.read_text())
    edit(manifest)
    from dpaudit_mix.release.manifest import manifest_digest

    manifest["manifest_sha256"] = manifest_digest(manifest)
    path = root / "forged.json"
    path.write_text(json.dumps(manifest))
    return path


@case("traceback", "check-release with steps = 1e9 (allocates petabytes)")
def _steps(root: Path) -> bool:
    return cli("check-release", _forged(root, lambda m: m["claim"].update(steps=10**9)), timeout=120).returncode == 2


@case("traceback", 'check-release with steps = "10"')
def _steps_text(root: Path) -> bool:
    return one_line(cli("check-release", _forged(root, lambda m: m["claim"].update(steps="10"))), 2)


@case("traceback", "check-release with weights = {}")
def _weights_type(root: Path) -> bool:
    return one_line(cli("check-release", _forged(root, lambda m: m.update(weights={}))), 2)


@case("traceback", "a symlink loop as --out")
def _loop(root: Path) -> bool:
    (root / "loop").symlink_to(root / "loop")
    return one_line(cli("mix", "--problem", problem(root), "--nonprivate", "--out", root / "loop" / "w.json"), 2)


@case("traceback", "a name over the OS limit in --out")
def _long(root: Path) -> bool:
    return one_line(cli("mix", "--problem", problem(root), "--nonprivate", "--out", root / ("n" * 300) / "w.json"), 2)


@case("traceback", "a non-UTF-8 locale (PYTHONIOENCODING=ascii)")
def _locale(root: Path) -> bool:
    spec = root / "s.toml"
    spec.write_text("epsilons = []\n")
    return one_line(cli("pipeline", spec, env={**os.environ, "PYTHONIOENCODING": "ascii"}), 2)


@case("traceback", "stdout is /dev/full")
def _dev_full(root: Path) -> bool:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "dpaudit_mix.cli",
                "account",
                "--noise-multiplier",
                "1",
                "--sample-rate",
                "1",
                "--steps",
                "10",
                "--delta",
                "1e-5",
            ],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    return done.returncode not in (0, 1, 120) and "Traceback" not in done.stderr


@case("traceback", "account --steps 1e9")
def _account(root: Path) -> bool:
    try:
        done = cli(
            "account",
            "--noise-multiplier",
            "1",
            "--sample-rate",
            "0.01",
            "--steps",
            "1000000000",
            "--delta",
            "1e-5",
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        return False
    return one_line(done, 2)


@case("traceback", "pretrain_examples = 1e12 (before any cache is written)")
def _pretrain(root: Path) -> bool:
    spec = root / "s.toml"
    spec.write_text("pretrain_examples = 1000000000000\n")
    return one_line(cli("pipeline", spec, "--out", root / "o", timeout=300), 2) and not (root / "o").exists()


@case("traceback", "synthetic_size = 1e12 in warmsyn")
def _synthetic(root: Path) -> bool:
    spec = root / "s.toml"
    spec.write_text("synthetic_size = 1000000000000\n")
    return one_line(cli("warmsyn", spec, "--out", root / "o", timeout=300), 2) and not (root / "o").exists()


@case("traceback", "warmsyn at epsilon = 1e-4 (no preflight)")
def _warmsyn_eps(root: Path) -> bool:
    spec = root / "s.toml"
    spec.write_text(
        "epsilons = [1e-4]\npublic_size = 40\nsynthetic_size = 200\nedm_steps = 30\nseeds = 1\n"
        "warmup_steps = 10\nfinetune_epochs = 1\nsensitive_fraction = 0.2\n"
    )
    done = cli("warmsyn", spec, "--out", root / "o", timeout=600)
    return one_line(done, 2) and not (root / "o" / "cache" / "synthetic").exists()


# --- minor --------------------------------------------------------------------------------------


@case("minor", "calibrate --delta 1e-300 advises the accountant that failed")
def _advice(root: Path) -> bool:
    done = cli(
        "calibrate", "--epsilon", "1", "--delta", "1e-300", "--sample-rate", "1", "--steps", "10", "--accountant", "pld"
    )
    return done.returncode != 2 or "use the pld" not in done.stderr


@case("minor", "check-release accepts lambda off the simplex")
def _simplex(root: Path) -> bool:
    return cli("check-release", _forged(root, lambda m: m.update(weights=[0.9, 0.9, -0.8, 0.0]))).returncode == 3


@case("minor", "check-release accepts a lambda shorter than its sources")
def _short(root: Path) -> bool:
    return cli("check-release", _forged(root, lambda m: m.update(weights=m["weights"][:2]))).returncode == 3


@case("minor", "check-release accepts an unknown accountant")
def _accountant(root: Path) -> bool:
    return cli("check-release", _forged(root, lambda m: m["claim"].update(accountant="magic"))).returncode == 3


@case("minor", "check-release ignores the manifest's own audit verdict")
def _verdict(root: Path) -> bool:
    return cli("check-release", _forged(root, lambda m: m["audit"].update(violation=True))).returncode == 3


@case("minor", "check-release ignores the manifest's own verification verdict")
def _verified(root: Path) -> bool:
    return cli("check-release", _forged(root, lambda m: m["verification"].update(passed=False))).returncode == 3


@case("minor", "the ledger records the manifest's path but not its digest")
def _digest(root: Path) -> bool:
    book = root / "ledger.json"
    cli("release", release_spec(root, "s.toml", problem(root), ledger=str(book)), "--out", root / "a")
    entries = json.loads(book.read_text())["releases"]
    manifest = json.loads((root / "a" / "release.json").read_text())
    return entries and entries[-1].get("manifest_sha256") == manifest["manifest_sha256"]


def main() -> int:
    results: dict[str, list[bool]] = defaultdict(list)
    env_state = tempfile.mkdtemp(prefix="dpaudit-probe-state-")
    os.environ["XDG_STATE_HOME"] = env_state  # never the user's ledger
    for group, name, check in CASES:
        with tempfile.TemporaryDirectory(prefix="dpaudit-probe-") as tmp:
            try:
                ok = bool(check(Path(tmp)))
            except Exception as exc:  # a probe that cannot even run counts as a failure, named
                ok = False
                name = f"{name} ({type(exc).__name__}: {str(exc)[:60]})"
        results[group].append(ok)
        print(f"{'pass' if ok else 'FAIL'}  {group}: {name}", flush=True)
    print()
    for group, oks in results.items():
        print(f"{group}: {sum(oks)} of {len(oks)} pass")
    print(f"all: {sum(sum(o) for o in results.values())} of {sum(len(o) for o in results.values())} pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
