"""``plan-audit``: the size an audit needs to catch a leak, before any run is spent."""

from __future__ import annotations

import argparse
import json
import sys

from ..base.errors import EXIT_VIOLATION
from .common import CONFIDENCE_HELP, Parser, add_claim, add_json, command, finite, phases_of


def cmd_plan_audit(args: argparse.Namespace) -> int:
    """Print the plan (JSON on stdout, one line on stderr); exit 3 when no size on the ladder meets it."""
    from ..audit.plan import plan_audit

    plan = plan_audit(
        args.epsilon, args.delta, phases_of(args), detect=args.detect, one_run=args.one_run, confidence=args.confidence
    )
    print(json.dumps(plan.to_dict(), indent=2))
    print(f"dpaudit-mix: plan: {plan.line()}", file=sys.stderr)
    return 0 if plan.met else EXIT_VIOLATION


def commands(sub: argparse._SubParsersAction[Parser]) -> None:
    plan = command(
        sub,
        "plan-audit",
        "the runs (or, --one-run, canaries) an audit of a claim needs to catch sigma/DETECT with 90%% "
        "(exit 3 when no size up the ladder does)",
        "dpaudit-mix plan-audit --epsilon 1 --delta 1e-5 --detect 2",
        "dpaudit-mix plan-audit --epsilon 2 --delta 1e-5 --noise-multiplier 1.37 --sample-rate 0.1 --steps 20 "
        "--one-run",
    )
    add_claim(plan, "with --sample-rate and --steps: the claimed phase")
    plan.add_argument(
        "--detect", type=finite, default=2.0, help="the leak to catch: sigma/DETECT flagged with 90%% (default 2)"
    )
    plan.add_argument("--one-run", action="store_true", help="plan a one-run audit (canaries), not runs a side")
    plan.add_argument("--confidence", type=finite, default=0.95, help=CONFIDENCE_HELP)
    add_json(plan)
    plan.set_defaults(func=cmd_plan_audit)
