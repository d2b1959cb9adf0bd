"""audit (a mechanism, by its spec) and audit-scores (any stack's membership scores): exit 3 on a
violation, 4 when a σ = 0 control shows the audit blind."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .. import accounting
from ..base.atomic import check_output
from ..base.backend import BACKENDS
from ..base.errors import EXIT_INCONCLUSIVE, EXIT_VIOLATION, require
from .common import CONFIDENCE_HELP, Parser, add_claim, add_json, command, finite, phases_of, positive_int, seed_number


def cmd_audit(args: argparse.Namespace) -> int:
    from .. import finished
    from ..audit.spec import load_spec

    spec = load_spec(args.spec, problem=args.problem, runs=args.runs, epsilon=args.epsilon)
    if spec.one_run:
        require(args.runs is None, "--runs: a one-run audit trains once; set one_run_canaries in the spec instead")
        require(args.backend == "local", "--backend: a one-run audit is one training run; it runs here")
    out = check_output(
        args.out or Path("reports") / Path(args.spec).stem, folder=True, inputs=[args.spec, args.problem]
    )
    audit = _one_run_audit if spec.one_run else _many_run_audit
    return finished.once("audit", out, vars(args), Path(args.spec), [spec.problem], lambda: audit(args, spec, out))


def _many_run_audit(args: argparse.Namespace, spec: Any, out: Path) -> int:
    """``audit`` of a spec's neighbouring runs (``runs`` trainings, half with the canary)."""
    from ..audit.many_run.engine import run_audit
    from ..audit.many_run.report import summary_verdict, write_report

    outcome = run_audit(
        spec,
        out,
        noise_multiplier=args.noise_multiplier,
        backend=args.backend,
        scheduler=args.scheduler,
        report=write_report,
    )
    print(json.dumps(outcome.summary.to_dict(), indent=2))
    if outcome.summary.violation:
        print(f"dpaudit-mix: {summary_verdict(outcome.summary)}; see {out}/report.md", file=sys.stderr)
        return EXIT_VIOLATION
    return _inconclusive(outcome.summary, spec.epsilon, out)


def _one_run_audit(args: argparse.Namespace, spec: Any, out: Path) -> int:
    """``audit`` of a spec with ``one_run = true``: one training run, many canaries."""
    from ..audit.one_run.report import one_run_power_line
    from ..audit.run_once import run_one_run_audit, write_one_run_report

    outcome = run_one_run_audit(spec, out, noise_multiplier=args.noise_multiplier, report=write_one_run_report)
    print(json.dumps(outcome.summary.to_dict(), indent=2))
    for found in outcome.summary.results:
        if found.noise:
            print(f"dpaudit-mix: {found.name}: {one_run_power_line(found.result)}", file=sys.stderr)
    if outcome.summary.violation:
        found = next(r for r in outcome.summary.results if r.noise and r.result.violation)
        print(f"dpaudit-mix: {found.name}: {found.result.verdict_line()}; see {out}/report.md", file=sys.stderr)
        return EXIT_VIOLATION
    return _inconclusive(outcome.summary, spec.epsilon, out)


def _inconclusive(summary: Any, epsilon: float, out: Path) -> int:
    if summary.inconclusive:
        print(
            f"dpaudit-mix: INCONCLUSIVE: the sigma=0 control(s) {', '.join(summary.blind_controls)} "
            f"stay within the claimed epsilon {epsilon:g}: this audit cannot see leakage; see {out}/report.md",
            file=sys.stderr,
        )
        return EXIT_INCONCLUSIVE
    print(f"dpaudit-mix: no violation of the claimed epsilon {epsilon:g}; report {out}/report.html", file=sys.stderr)
    return 0


def cmd_audit_scores(args: argparse.Namespace) -> int:
    from ..audit.many_run.score_file import audit_score_file, read_scores
    from ..audit.many_run.words import verdict_line

    phases = phases_of(args)
    path = Path(args.file)
    out = Path(args.out) if args.out else None
    claim = {"epsilon": args.epsilon, "delta": args.delta, "phases": phases, "confidence": args.confidence}
    claim.update(out=out, accountant=args.accountant)
    if args.one_run:
        return _one_run_scores(args, path, claim)
    extra = {"threshold": args.threshold, "seed": args.seed or 0, "label": args.label, "curve": args.curve}
    result = audit_score_file(path, read_scores(path, args.threshold), **claim, **extra, progress=True)
    print(json.dumps(result.to_dict(), indent=2))
    see = f"; see {out}/report.md" if out else ""
    if result.accounted is not None:
        print(f"dpaudit-mix: {result.accounted.line()}", file=sys.stderr)
    power = result.power
    said = f"not simulated: {result.power_unsimulated}" if power is None else power.line(f"{result.runs} runs")
    print(f"dpaudit-mix: power: {said}", file=sys.stderr)
    for warning in result.warnings:
        print(f"dpaudit-mix: warning: {warning}", file=sys.stderr)
    if result.violation:
        print(f"dpaudit-mix: {verdict_line(result, args.epsilon)}{see}", file=sys.stderr)
        return EXIT_VIOLATION
    if result.inconclusive:
        if not result.no_information:  # that case's warning line has said why
            print(
                f"dpaudit-mix: INCONCLUSIVE: the sigma=0 control stays within the claimed epsilon {args.epsilon:g}: "
                f"this attack cannot see leakage, and its silence proves nothing{see}",
                file=sys.stderr,
            )
        return EXIT_INCONCLUSIVE
    return 0


def _one_run_scores(args: argparse.Namespace, path: Path, claim: dict[str, Any]) -> int:
    """``audit-scores --one-run``: one training run's canaries (scores, membership), exit 3 on a violation."""
    from ..audit.many_run.score_file import audit_canary_file, read_canaries
    from ..audit.one_run.report import one_run_power_line

    require(args.threshold == "bonferroni", "--one-run chooses its guesses by its own fixed grid: drop --threshold")
    require(
        args.curve is None,
        "--curve: a one-run audit tests the curve of the phases it is given (--noise-multiplier, --sample-rate, "
        "--steps); without them the claim is (epsilon, delta) alone",
    )
    result = audit_canary_file(path, read_canaries(path), **claim, seed=args.seed, label=args.label)
    print(json.dumps(result.to_dict(), indent=2))
    if result.accounted is not None:
        print(f"dpaudit-mix: {result.accounted.line()}", file=sys.stderr)
    print(f"dpaudit-mix: {one_run_power_line(result)}", file=sys.stderr)
    if result.violation:
        see = f"; see {claim['out']}/report.md" if claim["out"] else ""
        print(f"dpaudit-mix: {result.verdict_line()}{see}", file=sys.stderr)
        return EXIT_VIOLATION
    return 0


def commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """audit (a mechanism, by spec) and audit-scores (any stack's scores)."""
    audit = command(
        sub,
        "audit",
        "empirical privacy audit of DP-MixMin (exit 3 on a violation)",
        "dpaudit-mix audit audits/default.toml --out reports/audit",
        "dpaudit-mix audit audits/default.toml --noise-multiplier 0.5  # a broken mechanism: exit 3",
    )
    audit.add_argument("spec", help="the audit spec (.toml; its keys: docs/design.md)")
    audit.add_argument("--problem", help="a problem file (overrides the spec)")
    audit.add_argument("--out", help="output folder (default reports/<spec name>)")
    audit.add_argument("--runs", type=positive_int, help="runs to train, half with the canary (default: the spec's)")
    audit.add_argument("--epsilon", type=finite, help="the claimed epsilon in nats (default: the spec's)")
    audit.add_argument(
        "--noise-multiplier",
        type=finite,
        help="override the calibrated sigma while the claim stays epsilon (simulates a broken mechanism)",
    )
    audit.add_argument("--backend", choices=BACKENDS, default="local", help="run the runs here or on a Dask cluster")
    audit.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://host:8786 (with --backend dask)")
    audit.set_defaults(func=cmd_audit)

    scores = command(
        sub,
        "audit-scores",
        "audit a claimed (epsilon, delta) from membership scores of any stack (exit 3 on a violation)",
        "dpaudit-mix audit-scores scores.npz --epsilon 1 --delta 1e-5 --out report",
        "dpaudit-mix audit-scores canaries.csv --one-run --epsilon 2 --delta 1e-5 --noise-multiplier 1.31 "
        "--sample-rate 0.01 --steps 3000",
    )
    scores.add_argument(
        "file", help=".npz with in_scores and out_scores, or .csv with columns score and label (1 = canary in)"
    )
    add_claim(
        scores,
        "with --sample-rate and --steps: the mechanism's phase; its PLD profile is the claim when q < 1 "
        "(default: mu-GDP from epsilon)",
    )
    scores.add_argument(
        "--accountant",
        default=accounting.DEFAULT_ACCOUNTANT,
        help="the accountant that calibrated sigma: --epsilon must be its epsilon for the phase (default pld)",
    )
    scores.add_argument("--confidence", type=finite, default=0.95, help=CONFIDENCE_HELP)
    scores.add_argument(
        "--threshold",
        default="bonferroni",
        help="how thresholds are chosen: bonferroni (default: a fixed rank grid, alpha shared, all runs) or split "
        "(chosen on half, counted on the other; 4.5x the memory)",
    )
    scores.add_argument(
        "--curve",
        choices=("gdp",),
        help="without --steps: state that the mechanism is mu-GDP, so its curve is tested (default: the claim is "
        "(epsilon, delta) alone and the verdict rests on the strict bound)",
    )
    scores.add_argument(
        "--seed",
        type=seed_number,
        help="names the streams of tie-breaking and of split's SELECT half (default 0; with --one-run, drawn from "
        "the OS CSPRNG and recorded in the result, so whoever writes the file cannot steer the ties: give a recorded "
        "seed to replay)",
    )
    scores.add_argument(
        "--label",
        default="scores",
        help="names those streams too (an audit's scores/<label>.npz with --seed of the audit reproduces its result)",
    )
    scores.add_argument(
        "--one-run",
        action="store_true",
        help="FILE holds one training run's canaries: scores and membership (.npz), or score,label (.csv)",
    )
    scores.add_argument("--out", help="output folder for audit.json, report.md/html and tradeoff.png")
    scores.set_defaults(func=cmd_audit_scores)

    for p in (audit, scores):
        add_json(p)
