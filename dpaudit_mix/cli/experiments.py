"""recovery, pipeline and warmsyn: the long runs, each with its report, resumable."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..base.atomic import check_output
from .common import Parser, add_backend, add_device, add_json, command, connected_backend


def cmd_recovery(args: argparse.Namespace) -> int:
    from .. import finished
    from ..recovery.spec import load_recovery_spec

    spec = load_recovery_spec(args.spec)
    out = check_output(args.out or Path("reports") / f"recovery-{Path(args.spec).stem}", folder=True)

    def run() -> int:
        from ..recovery.grid import run_recovery
        from ..recovery.report import write_recovery_report

        with connected_backend(args) as backend:
            result = run_recovery(spec, backend=backend)
        write_recovery_report(result, out)
        ks = result.k_scaling
        summary = {"out": str(out), "cells": len(result.cells), "k_slope": ks["slope"], "k_fit_range": ks["fit_range"]}
        print(json.dumps(summary, indent=2))
        cells = f"{len(result.cells)} (ε, ρ) cell{'s' if len(result.cells) != 1 else ''}"
        print(f"dpaudit-mix: recovery of {cells}; report {out}/report.html", file=sys.stderr)
        return 0

    return finished.once("recovery", out, vars(args), Path(args.spec), [spec.problem], run)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from .. import finished
    from ..base.specfile import read_spec_bytes, spec_table
    from ..experiments import pipeline_folder, pipeline_world, run_pipeline_file

    out = pipeline_folder(args.spec, args.out)
    world = pipeline_world(spec_table(Path(args.spec), read_spec_bytes(Path(args.spec))))

    def run() -> int:
        with connected_backend(args) as backend:
            summary = run_pipeline_file(args.spec, str(out), secure=args.secure, backend=backend, device=args.device)
        print(json.dumps(summary.to_dict(), indent=2))
        print(f"dpaudit-mix: pipeline done; report {out}/report.html", file=sys.stderr)
        return 0

    return finished.once("pipeline", out, vars(args), Path(args.spec), [world], run)


def cmd_warmsyn(args: argparse.Namespace) -> None:
    from ..experiments import run_warmsyn_file

    print(json.dumps(run_warmsyn_file(args.spec, args.out, device=args.device).to_dict(), indent=2))


def commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """recovery, pipeline and warmsyn: the long runs, each with its report."""
    recovery = command(
        sub,
        "recovery",
        "weight-recovery report: private λ against λ★ over ε × ρ and k",
        "dpaudit-mix recovery recovery/default.toml --workers 2",
    )
    recovery.add_argument("spec", help="the recovery spec (.toml; its keys: docs/design.md)")
    recovery.add_argument("--out", help="output folder (default reports/recovery-<spec name>)")
    add_backend(recovery, "cells")
    recovery.set_defaults(func=cmd_recovery)

    pipeline = command(
        sub,
        "pipeline",
        "proxies → private mixture → pretrain → DP finetune → evaluate",
        "dpaudit-mix pipeline pipeline/quick.toml",
        "dpaudit-mix pipeline pipeline/default.toml --workers 2 --device auto",
    )
    pipeline.add_argument("spec", help="the pipeline spec (.toml; its keys: docs/design.md)")
    pipeline.add_argument("--out", help="output folder (default reports/pipeline-<spec name>)")
    pipeline.add_argument(
        "--secure",
        action="store_true",
        help="every private noise and Poisson batch from the OS CSPRNG (not reproducible)",
    )
    add_backend(pipeline, "seeds")
    add_device(pipeline, "pretraining and finetuning")
    pipeline.set_defaults(func=cmd_pipeline)

    warmsyn = command(
        sub,
        "warmsyn",
        "EDM synthetic data from a small public set, warm-up, DP finetune: the WarmSyn ablation",
        "dpaudit-mix warmsyn warmsyn/default.toml",
    )
    warmsyn.add_argument("spec", help="the WarmSyn spec (.toml; its keys: docs/design.md)")
    warmsyn.add_argument("--out", help="output folder (default reports/warmsyn-<spec name>)")
    add_device(warmsyn, "the EDM, the warm-ups and the finetunes")
    warmsyn.set_defaults(func=cmd_warmsyn)

    for p in (recovery, pipeline, warmsyn):
        add_json(p)
