"""release, check-release, signing-key and the privacy ledger."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..base.errors import EXIT_INCONCLUSIVE, EXIT_VIOLATION, require
from .common import Parser, add_json, command, emit, finite


def cmd_release(args: argparse.Namespace) -> int:
    from ..release.gate import Refused, release

    out = Path(args.out or Path("reports") / f"release-{Path(args.spec).stem}")
    try:
        published = release(args.spec, out, noise_multiplier=args.noise_multiplier)
    except Refused as refusal:
        note = f"; {refusal.private}" if refusal.private else ""
        print(f"dpaudit-mix: release REFUSED ({refusal.stage}): {refusal.reason}{note}", file=sys.stderr)
        return refusal.exit_code
    print(json.dumps(published.to_dict(), indent=2))
    print(f"dpaudit-mix: {published.line()}", file=sys.stderr)
    return 0


def cmd_check_release(args: argparse.Namespace) -> int:
    from ..release.check import inspect_release

    found = inspect_release(args.manifest, args.problem, public_key=args.public_key, ledger_path=args.ledger)
    print(json.dumps({"manifest": args.manifest, **found.to_dict()}, indent=2))
    for note in found.notes:
        print(f"dpaudit-mix: note: {note}", file=sys.stderr)
    if found.problems:
        print("dpaudit-mix: check-release FAILED:\n  " + "\n  ".join(found.problems), file=sys.stderr)
        return EXIT_VIOLATION
    if found.signer_unknown:
        print("dpaudit-mix: integrity verified, signer unknown: pass --public-key FILE", file=sys.stderr)
        return EXIT_INCONCLUSIVE
    return 0


def cmd_signing_key(args: argparse.Namespace) -> None:
    """The public key this machine signs releases with (made now if it has none): what a reader
    passes to ``check-release --public-key``."""
    from ..base.atomic import check_output, write_text
    from ..release import signing

    out = None if args.out is None else check_output(args.out, folder=False)  # before a key is made
    public = signing.signing_key().public_key()
    if out is not None:
        write_text(out, signing.public_pem(public))
    emit({"fingerprint": signing.fingerprint(public), "public_key_pem": signing.public_pem(public)}, None)


def cmd_ledger(args: argparse.Namespace) -> None:
    """``ledger show``: every data set with its cap, δ and ε spent; ``ledger set-budget DATA
    --epsilon X`` (or ``--no-cap``): the one way to change a cap, logged in the ledger."""
    from datetime import UTC, datetime

    from ..release import ledger

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
            "spent_epsilon": ledger.spent(entries, key, problem_sha256="", delta=fixed.delta),
            "releases": sum(e.data_sha256 == key for e in entries),
            "kinds": sorted({e.kind or "unknown" for e in entries if e.data_sha256 == key}),
        }
        for key, fixed in datasets.items()
    }
    emit({"ledger": str(path), "datasets": shown}, None)


def commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """release, check-release and the privacy ledger."""
    release_cmd = command(
        sub,
        "release",
        "verify, audit the exact configuration, then release λ or a finetuned model (exit 3 if refused)",
        "dpaudit-mix release releases/default.toml --out reports/release",
        "dpaudit-mix release releases/model.toml",
    )
    release_cmd.add_argument("spec", help="the release spec (.toml; its keys: docs/design.md)")
    release_cmd.add_argument("--out", help="output folder (default reports/release-<spec name>)")
    release_cmd.add_argument(
        "--noise-multiplier",
        type=finite,
        help="run a sigma at least the calibrated one (more noise than the claim needs); a smaller one is "
        "refused (exit 3): `audit --noise-multiplier` simulates a leak",
    )
    release_cmd.set_defaults(func=cmd_release)

    check = command(
        sub,
        "check-release",
        "re-verify a release.json (signature, hashes, epsilon, ledger, problem file or model weights)",
        "dpaudit-mix check-release reports/release/release.json",
        "dpaudit-mix check-release received/release.json --public-key releaser.pem --problem p.npz",
    )
    check.add_argument("manifest", help="the release's release.json")
    check.add_argument("--problem", help="the problem file to check against (default: the path in the manifest)")
    check.add_argument(
        "--public-key",
        help="the releaser's public key (PEM, from `dpaudit-mix signing-key`; default: this machine's own key; "
        "with neither, a signer not known here is exit 4)",
    )
    check.add_argument(
        "--ledger", help="the ledger that released it (default: $DPAUDIT_MIX_LEDGER, else the user state folder)"
    )
    check.set_defaults(func=cmd_check_release)

    key = command(
        sub,
        "signing-key",
        "print the public key this machine signs releases with",
        "dpaudit-mix signing-key --out releaser.pem",
    )
    key.add_argument("--out", help="also write the public key (PEM) to this file")
    key.set_defaults(func=cmd_signing_key)

    book = command(
        sub,
        "ledger",
        "the privacy ledger: show each data set's cap and spend, or change a cap",
        "dpaudit-mix ledger show",
        "dpaudit-mix ledger set-budget 3f9a2c1e --epsilon 8",
    )
    book.add_argument(
        "action", choices=("show", "set-budget"), help="show every data set, or set-budget of one (with DATA)"
    )
    book.add_argument("data", nargs="?", help="set-budget: the data set's digest (8+ characters of it)")
    book.add_argument("--epsilon", type=finite, help="set-budget: the new cap on the data set's epsilon (in nats)")
    book.add_argument("--no-cap", action="store_true", help="set-budget: remove the cap")
    book.add_argument("--ledger", help="the ledger file (default: $DPAUDIT_MIX_LEDGER, else the user state folder)")
    book.set_defaults(func=cmd_ledger)

    for p in (release_cmd, check):
        add_json(p)
