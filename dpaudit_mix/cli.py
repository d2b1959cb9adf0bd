"""The `dpaudit-mix` command line (DESIGN §10).

Exit 0 success, 2 bad input, 3 audit violation (or a refused release / failed check), 4 an
inconclusive audit (a σ = 0 control saw nothing, so the audit cannot see leakage), 5 a fault of
the machine (disk full, I/O error, stdout closed), 130 interrupted (Ctrl-C; rerun to resume).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from . import accounting
from . import problem as problem_io
from .atomic import check_output, write_json, write_text
from .backend import BACKENDS, Backend
from .data import registry
from .data.proxies import PROXIES
from .errors import EXIT_BAD_INPUT, EXIT_FAULT, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_VIOLATION, InputError, require
from .learner import LearnerConfig
from .models.device import DEVICES

# Each command imports what it needs when it runs: torch, opacus, pandas and seaborn take seconds
# to load, and `--help` or `bound` should not wait for them (bench/startup.py measures this).

#: errors of a path the user gave (exit 2); any other OSError is the machine's fault (exit 5).
PATH_ERRORS = {
    errno.ELOOP,
    errno.ENAMETOOLONG,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOENT,
    errno.EEXIST,
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit 2 like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(message)


def _emit(result: dict[str, Any], out: str | None) -> None:
    """JSON on stdout; with ``out``, the JSON goes to that file and stdout gets a short summary
    (lists longer than a few entries are left out of it)."""
    if out:
        write_json(out, result)
        result = {
            "out": out,
            **{key: value for key, value in result.items() if not (isinstance(value, list) and len(value) > 64)},
        }
    print(json.dumps(result, indent=2))


def _integer(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its message
    return parse


_positive_int, _count, _seed = _integer(1), _integer(0), _integer(0)


def _finite(text: str) -> float:
    """An argparse type: a finite float (ranges are checked where the value is used)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def cmd_mix(args: argparse.Namespace) -> None:
    from . import mix

    require(
        not (args.secure and args.seed is not None),
        "--secure and --seed exclude each other: --seed makes the noise reproducible, which a release must not be",
    )
    if args.out:
        check_output(args.out, folder=False, inputs=[args.problem])
    prob = problem_io.load(args.problem)
    if args.nonprivate:
        _emit(mix.nonprivate(prob).to_dict(), args.out)
        return
    require(args.epsilon is not None and args.delta is not None, "give --nonprivate, or both --epsilon and --delta")
    settings = LearnerConfig(steps=args.steps, clip=args.clip, sample_rate=args.sample_rate, user_level=args.user_level)
    mixed = mix.private(prob, args.epsilon, args.delta, settings, args.runs, args.accountant, args.seed)
    if args.seed is not None:
        print(
            f"dpaudit-mix: warning: --seed {args.seed}: the noise is reproducible from the seed; for audits and "
            "experiments, not for release",
            file=sys.stderr,
        )
    _emit(mixed.to_dict(), args.out)


def _phase(args: argparse.Namespace) -> accounting.GaussianPhase:
    return accounting.GaussianPhase(args.noise_multiplier, args.sample_rate, args.steps)


def cmd_account(args: argparse.Namespace) -> None:
    _emit({"epsilon": accounting.epsilons([_phase(args)], args.delta)}, None)


def cmd_calibrate(args: argparse.Namespace) -> None:
    sigma = accounting.calibrate(args.epsilon, args.delta, args.sample_rate, args.steps, args.accountant)
    _emit({"noise_multiplier": sigma, "accountant": args.accountant}, None)


def cmd_problem(args: argparse.Namespace) -> None:
    import numpy as np

    from .optimum import mixmin
    from .recovery.metrics import cos_similarity

    require((args.name is None) != (args.data is None), "give a world NAME or --data DATA.toml (one of them)")
    name = args.name if args.data is None else args.data
    require(args.data is None or args.data.endswith(".toml"), f"--data takes a data manifest (.toml), got {args.data}")
    check_output(args.out, folder=False)
    proxy = registry.proxy_spec(name, args.proxy, args.proxy_epochs)
    prob = registry.build(name, args.task or registry.tasks(name)[0], args.seed, proxy=proxy)
    problem_io.save(prob, args.out)
    star = mixmin(prob.logp).weights
    _emit(
        {
            "problem": name,
            "task": prob.task,
            "n": prob.n,
            "k": prob.k,
            "out": args.out,
            "sources": list(prob.sources),
            **({"proxy": prob.meta["proxy"]} if "proxy" in prob.meta else {}),
            **(
                {"proxy_validation_accuracy": [float(a) for a in prob.meta["proxy_validation_accuracy"].split(",")]}
                if "proxy_validation_accuracy" in prob.meta
                else {}
            ),
            "lambda_star": star.tolist(),
            "cos_lambda_star_uniform": float(cos_similarity(star, np.ones(prob.k))),
        },
        None,
    )


def cmd_export(args: argparse.Namespace) -> None:
    from .data.export import export_world

    out = check_output(args.out, folder=True)
    manifest = export_world(args.name, out, args.seed)
    _emit({"world": args.name, "seed": args.seed, "manifest": str(manifest)}, None)


def cmd_bound(args: argparse.Namespace) -> None:
    from .audit.bounds import epsilon_lower_bound

    bound = epsilon_lower_bound(args.fp, args.fn, args.negatives, args.positives, args.delta, args.confidence)
    result: dict[str, Any] = dataclasses.asdict(bound)
    if args.claimed_mu is not None:
        from .audit.profile import GaussianTradeOff  # scipy.stats: only when a curve is tested

        require(args.claimed_mu > 0, f"--claimed-mu must be > 0, got {args.claimed_mu}")
        result["claimed_mu"] = args.claimed_mu
        result["profile_violation"] = bool(GaussianTradeOff(args.claimed_mu).violated(bound.fpr_upper, bound.fnr_upper))
    _emit(result, None)


def cmd_audit(args: argparse.Namespace) -> int:
    from . import finished
    from .audit.spec import load_spec

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
    from .audit.engine import run_audit
    from .audit.report import summary_verdict, write_report

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
    from .audit.run_once import run_one_run_audit, write_one_run_report
    from .audit.score_file import one_run_line

    outcome = run_one_run_audit(spec, out, noise_multiplier=args.noise_multiplier, report=write_one_run_report)
    print(json.dumps(outcome.summary.to_dict(), indent=2))
    if outcome.summary.violation:
        found = next(r for r in outcome.summary.results if r.noise and r.result.violation)
        print(f"dpaudit-mix: {found.name}: {one_run_line(found.result)}; see {out}/report.md", file=sys.stderr)
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
    return 0


def cmd_audit_scores(args: argparse.Namespace) -> int:
    from .audit.score_file import audit_score_file, read_scores
    from .audit.scores import verdict_line

    mechanism = (args.noise_multiplier, args.sample_rate, args.steps)
    require(
        all(v is None for v in mechanism) or all(v is not None for v in mechanism),
        "give all of --noise-multiplier, --sample-rate and --steps (the mechanism's phase), or none",
    )
    phases = None if args.steps is None else [accounting.GaussianPhase(*mechanism)]
    path = Path(args.file)
    out = Path(args.out) if args.out else None
    if args.one_run:
        return _one_run_scores(args, path, phases, out)
    result = audit_score_file(
        path,
        read_scores(path),
        args.epsilon,
        args.delta,
        phases,
        args.confidence,
        args.threshold,
        args.seed,
        args.label,
        out,
        args.accountant,
        progress=True,
        curve=args.curve,
    )
    print(json.dumps(result.to_dict(), indent=2))
    see = f"; see {out}/report.md" if out else ""
    for warning in result.warnings:
        print(f"dpaudit-mix: warning: {warning}", file=sys.stderr)
    if result.violation:
        print(f"dpaudit-mix: {verdict_line(result, args.epsilon)}{see}", file=sys.stderr)
        return EXIT_VIOLATION
    if result.inconclusive:
        print(
            f"dpaudit-mix: INCONCLUSIVE: the sigma=0 control stays within the claimed epsilon {args.epsilon:g}: "
            f"this attack cannot see leakage, and its silence proves nothing{see}",
            file=sys.stderr,
        )
        return EXIT_INCONCLUSIVE
    return 0


def _one_run_scores(
    args: argparse.Namespace, path: Path, phases: list[accounting.GaussianPhase] | None, out: Path | None
) -> int:
    """``audit-scores --one-run``: one training run's canaries (scores, membership), exit 3 on a violation."""
    from .audit.score_file import audit_canary_file, one_run_line, read_canaries

    require(args.threshold == "bonferroni", "--one-run chooses its guesses by its own fixed grid: drop --threshold")
    result = audit_canary_file(
        path, read_canaries(path), args.epsilon, args.delta, phases, args.confidence, out, args.accountant
    )
    print(json.dumps(result.to_dict(), indent=2))
    if result.violation:
        see = f"; see {out}/report.md" if out else ""
        print(f"dpaudit-mix: {one_run_line(result)}{see}", file=sys.stderr)
        return EXIT_VIOLATION
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    from .pipeline.release import release_model
    from .release.gate import Refused, release

    out = Path(args.out or Path("reports") / f"release-{Path(args.spec).stem}")
    try:
        published = release(args.spec, out, noise_multiplier=args.noise_multiplier, models=release_model)
    except Refused as refusal:
        note = f"; {refusal.private}" if refusal.private else ""
        print(f"dpaudit-mix: release REFUSED ({refusal.stage}): {refusal.reason}{note}", file=sys.stderr)
        return refusal.exit_code
    print(json.dumps(published.to_dict(), indent=2))
    return 0


def cmd_check_release(args: argparse.Namespace) -> int:
    from .release.check import inspect_release

    found = inspect_release(args.manifest, args.problem, public_key=args.public_key, ledger_path=args.ledger)
    print(json.dumps({"manifest": args.manifest, **found.to_dict()}, indent=2))
    for note in found.notes:
        print(f"dpaudit-mix: note: {note}", file=sys.stderr)
    if found.problems:
        print("dpaudit-mix: check-release FAILED:\n  " + "\n  ".join(found.problems), file=sys.stderr)
        return EXIT_VIOLATION
    return 0


def cmd_signing_key(args: argparse.Namespace) -> None:
    """The public key this machine signs releases with (made now if it has none): what a reader
    passes to ``check-release --public-key``."""
    from .atomic import check_output, write_text
    from .release import signing

    out = None if args.out is None else check_output(args.out, folder=False)  # before a key is made
    public = signing.signing_key().public_key()
    if out is not None:
        write_text(out, signing.public_pem(public))
    _emit({"fingerprint": signing.fingerprint(public), "public_key_pem": signing.public_pem(public)}, None)


def cmd_ledger(args: argparse.Namespace) -> None:
    """``ledger show``: every data set with its cap, δ and ε spent; ``ledger set-budget DATA
    --epsilon X`` (or ``--no-cap``): the one way to change a cap, logged in the ledger."""
    from datetime import UTC, datetime

    from .release import ledger

    path = Path(args.ledger) if args.ledger else ledger.default_path()
    if args.action == "set-budget":
        require(args.data is not None, "set-budget needs the data set's digest (see `dpaudit-mix ledger show`)")
        require((args.epsilon is not None) != args.no_cap, "give --epsilon X or --no-cap, one of them")
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        ledger.set_budget(path, args.data, None if args.no_cap else args.epsilon, stamp)
    datasets, entries = ledger.read_state(path)
    shown = {
        key: {
            **fixed.to_dict(),
            "keyed_by": {"sensitive": "the sensitive data's identity", "rows": "the problem's rows"}.get(
                fixed.identity, "an earlier ledger layout's key (migrated by the next release on this data)"
            ),
            "spent_epsilon": ledger.spent(entries, key, "", fixed.delta),
            "releases": sum(e.data_sha256 == key for e in entries),
            "kinds": sorted({e.kind or "unknown" for e in entries if e.data_sha256 == key}),
        }
        for key, fixed in datasets.items()
    }
    _emit({"ledger": str(path), "datasets": shown}, None)


def cmd_recovery(args: argparse.Namespace) -> int:
    from . import finished
    from .recovery.spec import load_recovery_spec

    spec = load_recovery_spec(args.spec)
    out = check_output(args.out or Path("reports") / f"recovery-{Path(args.spec).stem}", folder=True)

    def run() -> int:
        from .recovery.grid import run_recovery
        from .recovery.report import write_recovery_report

        with _backend(args) as backend:
            result = run_recovery(spec, backend=backend)
        write_recovery_report(result, out)
        ks = result.k_scaling
        summary = {"out": str(out), "cells": len(result.cells), "k_slope": ks["slope"], "k_fit_range": ks["fit_range"]}
        print(json.dumps(summary, indent=2))
        return 0

    return finished.once("recovery", out, vars(args), Path(args.spec), [spec.problem], run)


@contextlib.contextmanager
def _backend(args: argparse.Namespace) -> Iterator[Backend]:
    """The command's backend, connected (an unreachable scheduler is exit 2 before anything is
    written) and closed when the command ends."""
    backend = Backend.connect(args.backend, args.scheduler, args.workers)
    try:
        yield backend
    finally:
        backend.close()


def cmd_pipeline(args: argparse.Namespace) -> int:
    from . import finished
    from .experiments import pipeline_folder, pipeline_world, run_pipeline_file
    from .specfile import read_spec_bytes, spec_table

    out = pipeline_folder(args.spec, args.out)
    world = pipeline_world(spec_table(Path(args.spec), read_spec_bytes(Path(args.spec))))

    def run() -> int:
        with _backend(args) as backend:
            summary = run_pipeline_file(args.spec, str(out), secure=args.secure, backend=backend, device=args.device)
        print(json.dumps(summary.to_dict(), indent=2))
        return 0

    return finished.once("pipeline", out, vars(args), Path(args.spec), [world], run)


def cmd_warmsyn(args: argparse.Namespace) -> None:
    from .experiments import run_warmsyn_file

    print(json.dumps(run_warmsyn_file(args.spec, args.out, device=args.device).to_dict(), indent=2))


def cmd_verify(args: argparse.Namespace) -> int:
    from .verification.checks import FULL, QUICK
    from .verification.suite import verify, write_verification

    level = QUICK if args.quick else FULL
    out = check_output(args.out or Path("reports") / "verify", folder=True)
    junit = None if args.junit is None else check_output(args.junit, folder=False)
    verification = verify(level, self_test=args.self_test)
    write_verification(verification, out)
    if junit is not None:
        from .verification.junit import junit_xml

        write_text(junit, junit_xml(verification))
    problems = verification.failures()
    lines = [f"{c.name}: {'pass' if c.passed else 'FAIL'}: {c.summary}" for c in verification.checks]
    if verification.self_test is not None:
        st = verification.self_test
        lines.append(f"self-test: {st.caught} of {len(st.mutants)} mutants caught")
    print(
        json.dumps(verification.to_dict(), indent=2)
        if args.json
        else "\n".join(lines + [f"{verification.seconds} s; see {out}/verify.md"])
    )
    if problems:
        print("dpaudit-mix: verification FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return EXIT_VIOLATION
    return 0


ACCOUNTANT_HELP = "the accountant that calibrates sigma: rdp, prv, pld (default) or a registered one"


def _add_backend(parser: argparse.ArgumentParser, what: str) -> None:
    """--workers, --backend and --scheduler: where the command's independent {what} run (same results)."""
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        help=f"local processes running the {what} side by side (same results)",
    )
    parser.add_argument(
        "--backend", choices=BACKENDS, default="local", help=f"run the {what} here or on a Dask cluster"
    )
    parser.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://host:8786 (with --backend dask)")


def _add_device(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--device",
        choices=DEVICES,
        help=f"where {what} compute (default: the spec's device key, cpu); auto takes CUDA when present",
    )


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="JSON on stdout (always on; accepted for scripts)")


def _mixing_commands(sub: argparse._SubParsersAction[_Parser]) -> None:
    """mix, account, calibrate, problem, bound: one answer each, on stdout."""
    mix = sub.add_parser("mix", help="fit mixture weights (MixMin or DP-MixMin)")
    mix.add_argument("--problem", required=True)
    mode = mix.add_mutually_exclusive_group(required=True)
    mode.add_argument("--nonprivate", action="store_true")
    mode.add_argument("--epsilon", type=_finite)
    mix.add_argument("--delta", type=_finite)
    mix.add_argument("--runs", type=_positive_int, default=1)
    mix.add_argument(
        "--seed",
        type=_seed,
        help="reproducible noise from this seed (audits, experiments; never for "
        "release). Default: noise from the OS CSPRNG",
    )
    mix.add_argument("--steps", type=_positive_int, default=LearnerConfig.steps)
    mix.add_argument("--clip", type=_finite, default=LearnerConfig.clip)
    mix.add_argument("--sample-rate", type=_finite, default=1.0)
    mix.add_argument("--user-level", action="store_true")
    mix.add_argument("--secure", action="store_true", help="noise from the OS CSPRNG (the default without --seed)")
    mix.add_argument(
        "--accountant",
        default=accounting.DEFAULT_ACCOUNTANT,
        help=ACCOUNTANT_HELP,
    )
    mix.add_argument("--out")
    mix.set_defaults(func=cmd_mix)

    account = sub.add_parser("account", help="epsilon of DP-SGD under every accountant")
    account.add_argument("--noise-multiplier", type=_finite, required=True)
    account.add_argument("--sample-rate", type=_finite, required=True)
    account.add_argument("--steps", type=_positive_int, required=True)
    account.add_argument("--delta", type=_finite, required=True)
    account.set_defaults(func=cmd_account)

    calibrate = sub.add_parser("calibrate", help="noise multiplier for a target (epsilon, delta)")
    calibrate.add_argument("--epsilon", type=_finite, required=True)
    calibrate.add_argument("--delta", type=_finite, required=True)
    calibrate.add_argument("--sample-rate", type=_finite, required=True)
    calibrate.add_argument("--steps", type=_positive_int, required=True)
    calibrate.add_argument(
        "--accountant",
        default=accounting.DEFAULT_ACCOUNTANT,
        help=ACCOUNTANT_HELP,
    )
    calibrate.set_defaults(func=cmd_calibrate)

    prob = sub.add_parser("problem", help="build a problem file from an embedded world or your own files")
    prob.add_argument("name", nargs="?", help=f"one of: {', '.join(registry.PROBLEMS)}")
    prob.add_argument("--data", help="a data manifest (.toml) naming your public sources and sensitive set")
    prob.add_argument("--task", help="default: the world's first task (digit-0, or lm for the text world)")
    prob.add_argument("--seed", type=_seed, default=0)
    prob.add_argument("--proxy", choices=PROXIES, default="logistic", help="image worlds: the per-source proxies")
    prob.add_argument(
        "--proxy-epochs",
        type=_positive_int,
        help="cnn proxies: fixed epochs (default: early stopping on public validation)",
    )
    prob.add_argument("--out", required=True)
    prob.set_defaults(func=cmd_problem)

    bound = sub.add_parser("bound", help="Clopper-Pearson strict and GDP lower bounds from attack counts")
    for flag in ("--fp", "--fn", "--negatives", "--positives"):
        bound.add_argument(flag, type=_count, required=True)
    bound.add_argument("--delta", type=_finite, required=True)
    bound.add_argument("--confidence", type=_finite, default=0.95)
    bound.add_argument(
        "--claimed-mu",
        type=_finite,
        help="the claim as mu-GDP: adds profile_violation (the CP point lies below its trade-off curve)",
    )
    bound.set_defaults(func=cmd_bound)

    for p in (mix, account, calibrate, prob, bound):
        _add_json(p)


def _export_command(sub: argparse._SubParsersAction[_Parser]) -> None:
    """export-world: an embedded world as the files a data manifest names."""
    export = sub.add_parser("export-world", help="write an embedded world as data files and a data manifest")
    export.add_argument("name", help=f"one of: {', '.join(registry.PROBLEMS)}")
    export.add_argument("--seed", type=_seed, default=0)
    export.add_argument("--out", required=True, help="a new folder: data.toml and the files it names")
    export.set_defaults(func=cmd_export)
    _add_json(export)


def _audit_commands(sub: argparse._SubParsersAction[_Parser]) -> None:
    """audit (a mechanism, by spec) and audit-scores (any stack's scores)."""
    audit = sub.add_parser("audit", help="empirical privacy audit of DP-MixMin (exit 3 on a violation)")
    audit.add_argument("spec")
    audit.add_argument("--problem", help="a problem file (overrides the spec)")
    audit.add_argument("--out", help="output folder (default reports/<spec name>)")
    audit.add_argument("--runs", type=_positive_int)
    audit.add_argument("--epsilon", type=_finite)
    audit.add_argument(
        "--noise-multiplier",
        type=_finite,
        help="override the calibrated sigma while the claim stays epsilon (simulates a broken mechanism)",
    )
    audit.add_argument("--backend", choices=BACKENDS, default="local")
    audit.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://host:8786")
    audit.set_defaults(func=cmd_audit)

    scores = sub.add_parser(
        "audit-scores",
        help="audit a claimed (epsilon, delta) from membership scores of any stack (exit 3 on a violation)",
    )
    scores.add_argument(
        "file", help=".npz with in_scores and out_scores, or .csv with columns score and label (1 = canary in)"
    )
    scores.add_argument("--epsilon", type=_finite, required=True)
    scores.add_argument("--delta", type=_finite, required=True)
    scores.add_argument(
        "--noise-multiplier",
        type=_finite,
        help="with --sample-rate and --steps: the mechanism's "
        "phase; its PLD profile is the claim when q < 1 (default: mu-GDP from epsilon)",
    )
    scores.add_argument("--sample-rate", type=_finite)
    scores.add_argument("--steps", type=_positive_int)
    scores.add_argument(
        "--accountant",
        default=accounting.DEFAULT_ACCOUNTANT,
        help="the accountant that calibrated sigma: --epsilon must be its epsilon for the phase (default pld)",
    )
    scores.add_argument("--confidence", type=_finite, default=0.95)
    scores.add_argument("--threshold", default="bonferroni", help="bonferroni (default) or split")
    scores.add_argument(
        "--curve",
        choices=("gdp",),
        help="without --steps: state that the mechanism is mu-GDP, so its curve is tested (default: the claim is "
        "(epsilon, delta) alone and the verdict rests on the strict bound)",
    )
    scores.add_argument("--seed", type=_seed, default=0, help="names the stream of the split strategy's SELECT half")
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
        _add_json(p)


def _release_commands(sub: argparse._SubParsersAction[_Parser]) -> None:
    """release, check-release and the privacy ledger."""
    release_cmd = sub.add_parser(
        "release",
        help="verify, audit the exact configuration, then release λ or a finetuned model (exit 3 if refused)",
    )
    release_cmd.add_argument("spec")
    release_cmd.add_argument("--out", help="output folder (default reports/release-<spec name>)")
    release_cmd.add_argument(
        "--noise-multiplier",
        type=_finite,
        help="run a sigma at least the calibrated one (more noise than the claim needs); a smaller one is "
        "refused (exit 3): `audit --noise-multiplier` simulates a leak",
    )
    release_cmd.set_defaults(func=cmd_release)

    check = sub.add_parser(
        "check-release", help="re-verify a release.json (hash, epsilon, problem file or model weights)"
    )
    check.add_argument("manifest")
    check.add_argument("--problem", help="the problem file to check against (default: the path in the manifest)")
    check.add_argument(
        "--public-key",
        help="the releaser's public key (PEM, from `dpaudit-mix signing-key`; default: this machine's own key)",
    )
    check.add_argument(
        "--ledger", help="the ledger that released it (default: $DPAUDIT_MIX_LEDGER, else the user state folder)"
    )
    check.set_defaults(func=cmd_check_release)

    key = sub.add_parser("signing-key", help="print the public key this machine signs releases with")
    key.add_argument("--out", help="also write the public key (PEM) to this file")
    key.set_defaults(func=cmd_signing_key)

    book = sub.add_parser("ledger", help="the privacy ledger: show each data set's cap and spend, or change a cap")
    book.add_argument("action", choices=("show", "set-budget"))
    book.add_argument("data", nargs="?", help="set-budget: the data set's digest (8+ characters of it)")
    book.add_argument("--epsilon", type=_finite, help="set-budget: the new cap")
    book.add_argument("--no-cap", action="store_true", help="set-budget: remove the cap")
    book.add_argument("--ledger", help="the ledger file (default: $DPAUDIT_MIX_LEDGER, else the user state folder)")
    book.set_defaults(func=cmd_ledger)

    for p in (release_cmd, check):
        _add_json(p)


def _experiment_commands(sub: argparse._SubParsersAction[_Parser]) -> None:
    """recovery, pipeline, warmsyn and verify-accountant: the long runs, each with its report."""
    recovery = sub.add_parser("recovery", help="weight-recovery report: private λ against λ★ over ε × ρ and k")
    recovery.add_argument("spec")
    recovery.add_argument("--out", help="output folder (default reports/recovery-<spec name>)")
    _add_backend(recovery, "cells")
    recovery.set_defaults(func=cmd_recovery)

    pipeline = sub.add_parser("pipeline", help="proxies → private mixture → pretrain → DP finetune → evaluate")
    pipeline.add_argument("spec")
    pipeline.add_argument("--out", help="output folder (default reports/pipeline-<spec name>)")
    pipeline.add_argument(
        "--secure",
        action="store_true",
        help="every private noise and Poisson batch from the OS CSPRNG (not reproducible)",
    )
    _add_backend(pipeline, "seeds")
    _add_device(pipeline, "pretraining and finetuning")
    pipeline.set_defaults(func=cmd_pipeline)

    warmsyn = sub.add_parser(
        "warmsyn", help="EDM synthetic data from a small public set, warm-up, DP finetune: the seed paper's ablation"
    )
    warmsyn.add_argument("spec")
    warmsyn.add_argument("--out", help="output folder (default reports/warmsyn-<spec name>)")
    _add_device(warmsyn, "the EDM, the warm-ups and the finetunes")
    warmsyn.set_defaults(func=cmd_warmsyn)

    verify_cmd = sub.add_parser(
        "verify-accountant", help="check accountants, calibration, the learner's noise and an audit (exit 3 on failure)"
    )
    verify_cmd.add_argument("--quick", action="store_true", help="the CI-sized run (about 40 s on 2 cores)")
    verify_cmd.add_argument(
        "--self-test",
        action="store_true",
        help="also run the checks on deliberately broken mechanisms and report how many are caught",
    )
    verify_cmd.add_argument("--out", help="output folder for verify.json and verify.md (default reports/verify)")
    verify_cmd.add_argument(
        "--json", action="store_true", help="print the whole summary as JSON instead of one line per check"
    )
    verify_cmd.add_argument(
        "--junit", metavar="FILE", help="also write JUnit XML: one test case per check and per mutant (for CI)"
    )
    verify_cmd.set_defaults(func=cmd_verify)

    for p in (recovery, pipeline, warmsyn):
        _add_json(p)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dpaudit-mix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for commands in (_mixing_commands, _export_command, _audit_commands, _release_commands, _experiment_commands):
        commands(sub)
    return parser


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a closed or full stdout does not
    add a traceback to the one line already said."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Every failure ends in one line on stderr and its exit code (see the module docstring)."""
    for text in (sys.stdout, sys.stderr):  # a non-UTF-8 locale must not turn "λ" into a traceback
        if hasattr(text, "reconfigure"):
            text.reconfigure(errors="backslashreplace")
    try:
        args = build_parser().parse_args(argv)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed or full stdout fails here, inside the handlers below
        return code
    except InputError as exc:
        _say(f"dpaudit-mix: error: {exc}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _say("dpaudit-mix: interrupted; finished chunks and stages are kept: rerun the same command to resume")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        _say("dpaudit-mix: error: stdout was closed before the output was written")
        return EXIT_FAULT
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) or exc.filename is None:
            _silence_stdout()
        _say(f"dpaudit-mix: error: {exc.strerror or exc}{where}; nothing half-written was kept")
        return EXIT_BAD_INPUT if exc.errno in PATH_ERRORS and exc.filename else EXIT_FAULT
    except MemoryError:
        _say("dpaudit-mix: error: out of memory; ask for fewer runs, examples or steps")
        return EXIT_FAULT


if __name__ == "__main__":
    sys.exit(main())
