"""mix, account, calibrate, problem, bound and export-world: one answer each, on stdout."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from .. import accounting
from .. import problem as problem_io
from ..base.atomic import check_output
from ..base.errors import require
from ..data import registry
from ..data.proxies import PROXIES
from ..learner import LearnerConfig, learner_config
from .common import (
    ACCOUNTANT_HELP,
    CONFIDENCE_HELP,
    DELTA_HELP,
    NOISE_HELP,
    SAMPLE_RATE_HELP,
    STEPS_HELP,
    Parser,
    add_json,
    command,
    count,
    emit,
    finite,
    positive_int,
    seed_number,
)


def cmd_mix(args: argparse.Namespace) -> None:
    from .. import mix

    require(
        not (args.secure and args.seed is not None),
        "--secure and --seed exclude each other: --seed makes the noise reproducible, which a release must not be",
    )
    if args.out:
        check_output(args.out, folder=False, inputs=[args.problem, args.tune_on])
    prob = problem_io.load(args.problem)
    if args.nonprivate:
        emit(mix.nonprivate(prob).to_dict(), args.out)
        return
    require(args.epsilon is not None and args.delta is not None, "give --nonprivate, or both --epsilon and --delta")
    require(
        args.tune_on is None or args.clip is None,
        "--tune-on chooses C (and eta) by the public rehearsal; do not also give --clip",
    )
    public = None if args.tune_on is None else problem_io.load(args.tune_on)
    clip = LearnerConfig.clip if args.clip is None else args.clip
    settings = learner_config(args, clip=clip, learning_rate=LearnerConfig.learning_rate)  # η has no flag
    mixed = mix.private(
        prob,
        args.epsilon,
        args.delta,
        settings=settings,
        runs=args.runs,
        accountant=args.accountant,
        seed=args.seed,
        tune_on=public,
    )
    if public is None and args.epsilon >= mix.BIASED_FROM_EPSILON:
        print(
            f"dpaudit-mix: warning: at epsilon {args.epsilon:g} the learner's C = {settings.clip:g} and "
            f"eta = {settings.learning_rate:g} (untuned) bias lambda away from lambda-star more than the noise does; "
            "tune them on public rows: `dpaudit-mix problem WORLD --public --out pub.npz`, then --tune-on pub.npz",
            file=sys.stderr,
        )
    if args.seed is not None:
        print(
            f"dpaudit-mix: warning: --seed {args.seed}: the noise is reproducible from the seed; for audits and "
            "experiments, not for release",
            file=sys.stderr,
        )
    emit(mixed.to_dict(), args.out)


def _phase(args: argparse.Namespace) -> accounting.GaussianPhase:
    return accounting.GaussianPhase(args.noise_multiplier, args.sample_rate, args.steps)


def cmd_account(args: argparse.Namespace) -> None:
    emit({"epsilon": accounting.epsilons([_phase(args)], args.delta)}, None)


def cmd_calibrate(args: argparse.Namespace) -> None:
    sigma = accounting.calibrate(args.epsilon, args.delta, args.sample_rate, args.steps, args.accountant)
    emit({"noise_multiplier": sigma, "accountant": args.accountant}, None)


def cmd_problem(args: argparse.Namespace) -> None:
    import numpy as np

    from ..optimum import mixmin
    from ..recovery.metrics import cos_similarity
    from ..release.provenance import sealed

    require((args.name is None) != (args.data is None), "give a world NAME or --data DATA.toml (one of them)")
    name = args.name if args.data is None else args.data
    require(args.data is None or args.data.endswith(".toml"), f"--data takes a data manifest (.toml), got {args.data}")
    check_output(args.out, folder=False)
    proxy = registry.proxy_spec(name, args.proxy, args.proxy_epochs)
    build = registry.build_public if args.public else registry.build
    prob = build(name, args.task or registry.tasks(name)[0], seed=args.seed, proxy=proxy)
    problem_io.save(sealed(prob), args.out)  # its identity signed: the key of its data's one budget
    star = mixmin(prob.logp).weights
    emit(
        {
            "problem": name,
            "split": "public validation" if args.public else "sensitive",
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
    from ..data.export import export_world

    out = check_output(args.out, folder=True)
    manifest = export_world(args.name, out, args.seed)
    emit({"world": args.name, "seed": args.seed, "manifest": str(manifest)}, None)


def cmd_bound(args: argparse.Namespace) -> None:
    from ..audit.bounds import epsilon_lower_bound

    bound = epsilon_lower_bound(
        args.fp, args.fn, args.negatives, args.positives, args.delta, confidence=args.confidence
    )
    result: dict[str, Any] = dataclasses.asdict(bound)
    if args.claimed_mu is not None:
        from ..audit.profile import GaussianTradeOff  # scipy.stats: only when a curve is tested

        require(args.claimed_mu > 0, f"--claimed-mu must be > 0, got {args.claimed_mu}")
        result["claimed_mu"] = args.claimed_mu
        result["profile_violation"] = bool(GaussianTradeOff(args.claimed_mu).violated(bound.fpr_upper, bound.fnr_upper))
    emit(result, None)


def commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """mix, account, calibrate, problem, bound: one answer each, on stdout."""
    mix = command(
        sub,
        "mix",
        "fit mixture weights λ on a problem file (MixMin, or DP-MixMin at (epsilon, delta))",
        "dpaudit-mix mix --problem p.npz --epsilon 1 --delta 1e-5 --tune-on pub.npz --out lambda.json",
        "dpaudit-mix mix --problem p.npz --nonprivate",
    )
    mix.add_argument("--problem", required=True, help="the problem file (.npz from `dpaudit-mix problem`)")
    mode = mix.add_mutually_exclusive_group(required=True)
    mode.add_argument("--nonprivate", action="store_true", help="fit λ★ without noise (never for release)")
    mode.add_argument("--epsilon", type=finite, help="fit privately at this epsilon (in nats; with --delta)")
    mix.add_argument("--delta", type=finite, help=DELTA_HELP)
    mix.add_argument("--runs", type=positive_int, default=1, help="independent private fits to report (a count)")
    mix.add_argument(
        "--seed",
        type=seed_number,
        help="reproducible noise from this seed (audits, experiments; never for "
        "release). Default: noise from the OS CSPRNG",
    )
    mix.add_argument("--steps", type=positive_int, default=LearnerConfig.steps, help=STEPS_HELP)
    mix.add_argument(
        "--clip",
        type=finite,
        help=f"the learner's clipping norm C (default {LearnerConfig.clip:g}; not with --tune-on)",
    )
    mix.add_argument(
        "--tune-on",
        metavar="PUBLIC.npz",
        help="choose C and eta by rehearsing DP-MixMin at this run's sigma, T and q on a public problem with the "
        "same sources (`dpaudit-mix problem WORLD --public`); spends no privacy",
    )
    mix.add_argument("--sample-rate", type=finite, default=1.0, help=SAMPLE_RATE_HELP)
    mix.add_argument(
        "--user-level", action="store_true", help="protect each user (the problem's user ids), not each example"
    )
    mix.add_argument("--secure", action="store_true", help="noise from the OS CSPRNG (the default without --seed)")
    mix.add_argument(
        "--accountant",
        default=accounting.DEFAULT_ACCOUNTANT,
        help=ACCOUNTANT_HELP,
    )
    mix.add_argument("--out", help="write the JSON to this file (stdout gets a summary; default: stdout only)")
    mix.set_defaults(func=cmd_mix)

    account = command(
        sub,
        "account",
        "epsilon of DP-SGD under every accountant",
        "dpaudit-mix account --noise-multiplier 1.1 --sample-rate 0.01 --steps 1000 --delta 1e-5",
    )
    account.add_argument("--noise-multiplier", type=finite, required=True, help=NOISE_HELP)
    account.add_argument("--sample-rate", type=finite, required=True, help=SAMPLE_RATE_HELP)
    account.add_argument("--steps", type=positive_int, required=True, help=STEPS_HELP)
    account.add_argument("--delta", type=finite, required=True, help=DELTA_HELP)
    account.set_defaults(func=cmd_account)

    calibrate = command(
        sub,
        "calibrate",
        "noise multiplier for a target (epsilon, delta)",
        "dpaudit-mix calibrate --epsilon 1 --delta 1e-5 --sample-rate 0.01 --steps 1000 --accountant pld",
    )
    calibrate.add_argument("--epsilon", type=finite, required=True, help="the target epsilon (in nats)")
    calibrate.add_argument("--delta", type=finite, required=True, help=DELTA_HELP)
    calibrate.add_argument("--sample-rate", type=finite, required=True, help=SAMPLE_RATE_HELP)
    calibrate.add_argument("--steps", type=positive_int, required=True, help=STEPS_HELP)
    calibrate.add_argument(
        "--accountant",
        default=accounting.DEFAULT_ACCOUNTANT,
        help=ACCOUNTANT_HELP,
    )
    calibrate.set_defaults(func=cmd_calibrate)

    for p in (mix, account, calibrate):
        add_json(p)
    _problem_commands(sub)


def _problem_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """problem, bound and export-world: files and figures a user makes or checks by hand."""
    prob = command(
        sub,
        "problem",
        "build a problem file from an embedded world or your own files",
        "dpaudit-mix problem mnist-shift --task multiclass --out p.npz",
        "dpaudit-mix problem mnist-shift --task multiclass --public --out pub.npz",
        "dpaudit-mix problem --data data.toml --out p.npz",
    )
    prob.add_argument("name", nargs="?", help=f"one of: {', '.join(registry.PROBLEMS)}")
    prob.add_argument("--data", help="a data manifest (.toml) naming your public sources and sensitive set")
    prob.add_argument("--task", help="default: the world's first task (digit-0, or lm for the text world)")
    prob.add_argument("--seed", type=seed_number, default=0, help="root seed of the world's splits and proxies")
    prob.add_argument("--proxy", choices=PROXIES, default="logistic", help="image worlds: the per-source proxies")
    prob.add_argument(
        "--proxy-epochs",
        type=positive_int,
        help="cnn proxies: fixed epochs (default: early stopping on public validation)",
    )
    prob.add_argument(
        "--public",
        action="store_true",
        help="image worlds: the same proxies on the world's public validation rows instead of the sensitive set "
        "(for `mix --tune-on`; it spends no privacy)",
    )
    prob.add_argument("--out", required=True, help="the problem file to write (.npz)")
    prob.set_defaults(func=cmd_problem)

    bound = command(
        sub,
        "bound",
        "Clopper-Pearson strict and GDP lower bounds from attack counts",
        "dpaudit-mix bound --fp 3 --fn 400 --negatives 1000 --positives 1000 --delta 1e-5",
    )
    for flag, what in (
        ("--fp", "false positives: canary-out runs the attack called in"),
        ("--fn", "false negatives: canary-in runs it called out"),
        ("--negatives", "canary-out runs"),
        ("--positives", "canary-in runs"),
    ):
        bound.add_argument(flag, type=count, required=True, help=f"{what} (a count)")
    bound.add_argument("--delta", type=finite, required=True, help=DELTA_HELP)
    bound.add_argument("--confidence", type=finite, default=0.95, help=CONFIDENCE_HELP)
    bound.add_argument(
        "--claimed-mu",
        type=finite,
        help="the claim as mu-GDP: adds profile_violation (the CP point lies below its trade-off curve)",
    )
    bound.set_defaults(func=cmd_bound)

    for p in (prob, bound):
        add_json(p)

    export = command(
        sub,
        "export-world",
        "write an embedded world as data files and a data manifest",
        "dpaudit-mix export-world mnist-shift --out my-world",
    )
    export.add_argument("name", help=f"one of: {', '.join(registry.PROBLEMS)}")
    export.add_argument("--seed", type=seed_number, default=0, help="root seed of the world's splits")
    export.add_argument("--out", required=True, help="a new folder: data.toml and the files it names")
    export.set_defaults(func=cmd_export)
    add_json(export)
