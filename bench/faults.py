"""Fault checks on every long command, as an operator meets them (needs root: it mounts tmpfs).

For each command, with small inputs: (1) its output on a 256 KiB tmpfs (a full disk), (2) Ctrl-C
(SIGINT) mid-run, then the same command again (it must resume and succeed), (3) the user cache on
a read-only file system (a cache that cannot be written costs speed, never the result). Each line
says the exit code, how many lines stderr had and whether a traceback appeared.

    sudo .venv/bin/python bench/faults.py            # every command, about 10 minutes on 2 cores
    sudo .venv/bin/python bench/faults.py --only mix audit
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dpaudit_mix.problem import Problem, save

TEXT_TINY = (
    'world = "shakespeare-users"\nepsilons = [2.0]\nseeds = 1\nmethods = ["dpmixmin", "no_pretrain"]\n'
    "pretrain_windows = 300\npretrain_epochs = 1\nfinetune_steps = 2\nfinetune_users = 8\nwindows_per_user = 2\n"
    "mix_steps = 20\n"
)
IMAGE_TINY = (
    "epsilons = [2.0]\nseeds = 1\nsensitive_fraction = 0.25\npublic_fraction = 0.25\npretrain_examples = 300\n"
    'pretrain_epochs = 1\nfinetune_epochs = 1\nmethods = ["dpmixmin", "no_pretrain"]\n'
)
WARMSYN_TINY = (
    "public_size = 40\nsynthetic_size = 200\nedm_steps = 30\nepsilons = [2.0]\nseeds = 1\n"
    "warmup_steps = 10\nfinetune_epochs = 1\nsensitive_fraction = 0.2\n"
)


def _inputs(root: Path) -> dict[str, list[str]]:
    """Each long command's arguments (less --out) on small inputs written under ``root``."""
    rng = np.random.Generator(np.random.PCG64(2026))  # synthetic inputs for a fault drill, not a result
    probs = rng.beta(2.0, 1.0, size=(400, 6))
    problem = root / "p.npz"
    save(
        Problem(
            np.log(probs),
            tuple(f"s{i}" for i in range(6)),
            users=np.arange(400) // 4,
            heldout_logp=np.log(rng.beta(2.0, 1.0, size=(20, 6))),
            task="t",
        ),
        problem,
    )
    specs = {
        "audit": f'problem = "{problem}"\nruns = 20000\nchunk_size = 512\n',
        "recovery": f'problem = "{problem}"\nseeds = 50\nk_values = [2, 3, 4]\n',
        "release": f'problem = "{problem}"\naudit_runs = 20000\nledger = "{root / "ledger.json"}"\n',
        "image": IMAGE_TINY,
        "text": TEXT_TINY,
        "warmsyn": WARMSYN_TINY,
    }
    for name, text in specs.items():
        (root / f"{name}.toml").write_text(text)
    return {
        "mix": [
            "mix",
            "--problem",
            str(problem),
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--runs",
            "20000",
            "--out",
            "{out}/w.json",
        ],
        "audit": ["audit", str(root / "audit.toml"), "--out", "{out}/audit"],
        "recovery": ["recovery", str(root / "recovery.toml"), "--out", "{out}/recovery"],
        "pipeline": ["pipeline", str(root / "image.toml"), "--out", "{out}/pipeline"],
        "pipeline-text": ["pipeline", str(root / "text.toml"), "--out", "{out}/text"],
        "warmsyn": ["warmsyn", str(root / "warmsyn.toml"), "--out", "{out}/warmsyn"],
        "release": ["release", str(root / "release.toml"), "--out", "{out}/release"],
        "verify-accountant": ["verify-accountant", "--quick", "--out", "{out}/verify"],
    }


def _run(argv: list[str], out: Path, env: dict[str, str], interrupt_after: float | None = None) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "dpaudit_mix.cli", *[a.replace("{out}", str(out)) for a in argv]]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if interrupt_after is not None:
        time.sleep(interrupt_after)
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate()
    return proc.returncode, err


def _describe(code: int, err: str) -> str:
    # a progress bar on a pipe ends without a newline, so the message may follow it on one line
    lines = [
        line[line.index("dpaudit-mix:") :] for line in err.replace("\r", "\n").splitlines() if "dpaudit-mix:" in line
    ]
    return f"exit {code:>3}, {len(lines)} line(s){', TRACEBACK' if 'Traceback' in err else ''}: " + (
        lines[-1][:110] if lines else "(silent)"
    )


def _mount(path: Path, options: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="commands to check (default: all)")
    parser.add_argument("--interrupt-after", type=float, default=8.0, help="seconds before SIGINT")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpaudit-faults-") as tmp:
        root = Path(tmp)
        commands = _inputs(root)
        env = {**os.environ, "DPAUDIT_MIX_CACHE": str(root / "cache"), "XDG_STATE_HOME": str(root / "state")}
        full, readonly = root / "full", root / "readonly"
        _mount(full, "size=256k")
        _mount(readonly, "ro,size=64k")
        try:
            for name, argv in commands.items():
                if args.only and name not in args.only:
                    continue
                print(f"{name}:", flush=True)
                print(f"  full disk      {_describe(*_run(argv, full, env))}", flush=True)
                subprocess.run(["sh", "-c", f"rm -rf {full}/* {full}/.[!.]*"], check=False)
                work = root / f"out-{name}"
                print(f"  Ctrl-C         {_describe(*_run(argv, work, env, args.interrupt_after))}", flush=True)
                print(f"  rerun          {_describe(*_run(argv, work, env))}", flush=True)
                ro_env = {**env, "DPAUDIT_MIX_CACHE": str(readonly)}
                print(f"  read-only cache {_describe(*_run(argv, root / f'ro-{name}', ro_env))}", flush=True)
        finally:
            subprocess.run(["umount", str(full)], check=False)
            subprocess.run(["umount", str(readonly)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
