"""release, check-release, signing-key and the privacy ledger."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..base.errors import EXIT_INCONCLUSIVE, EXIT_VIOLATION, require
from .common import Parser, add_json, command, emit, finite

#: the one help text of every --ledger.
LEDGER_HELP = (
    "the privacy ledger: a path (an SQLite file) or a URL (sqlite:///PATH, postgresql://user@host:port/db) "
    "(default: $DPAUDIT_MIX_LEDGER, else ledger.sqlite in the user state folder)"
)


def cmd_release(args: argparse.Namespace) -> int:
    from ..release.gate import Refused, release

    out = Path(args.out or Path("reports") / f"release-{Path(args.spec).stem}")
    try:
        published = release(args.spec, out, noise_multiplier=args.noise_multiplier, ledger_path=args.ledger)
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


def cmd_ledger(args: argparse.Namespace) -> int:
    """The privacy ledger: ``show`` every data set (its cap, δ, ε spent and unit, and the ledger's
    head); ``set-budget DATA --epsilon X`` (or ``--no-cap``), the one way to change a cap;
    ``verify`` the chain (exit 3 naming the first row that breaks); ``import FILE`` a JSON ledger
    of an earlier layout; ``recover FOLDER``, commit a published release whose commit was lost;
    ``withdraw ID --why TEXT``, a reservation that published nothing; ``trust-key FILE``, another
    machine's signing key. Each change is a new signed row."""
    from datetime import UTC, datetime

    from ..release import ledger

    where = ledger.location(args.ledger)
    action, target = args.action, args.target
    needs = {
        "set-budget": "DATA (see `dpaudit-mix ledger show`)",
        "import": "FILE",
        "recover": "FOLDER",
        "withdraw": "ID",
        "trust-key": "FILE",
    }
    require(action not in needs or target is not None, f"ledger {action} needs {needs.get(action)}")
    if action == "verify":
        walked, broken = ledger.verify_chain(where)
        emit(
            {
                "ledger": where.shown,
                "rows": walked,
                "intact": broken is None,
                "broken": None if broken is None else {"row": broken.seq, "why": broken.why},
            },
            None,
        )
        if broken is not None:
            print(f"dpaudit-mix: ledger verify FAILED at {broken.line()}", file=sys.stderr)
            return EXIT_VIOLATION
        print(f"dpaudit-mix: ledger {where.shown}: {walked} rows, intact", file=sys.stderr)
        return 0
    if action == "set-budget":
        require((args.epsilon is not None) != args.no_cap, "give --epsilon X or --no-cap, one of them")
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        ledger.set_budget(where, target, None if args.no_cap else args.epsilon, stamp)
    elif action == "import":
        count = ledger.import_json(where, Path(target))
        print(f"dpaudit-mix: imported {count} releases from {target} into {where.shown}", file=sys.stderr)
    elif action == "recover":
        done = ledger.recover(where, Path(target))
        print(f"dpaudit-mix: committed reservation {done}, the release {target} holds", file=sys.stderr)
    elif action == "withdraw":
        require(bool(args.why), "ledger withdraw needs --why TEXT (it is recorded, signed)")
        ledger.withdraw(where, target, args.why)
    elif action == "trust-key":
        fingerprint = ledger.trust_key(where, Path(target))
        print(f"dpaudit-mix: the ledger {where.shown} now trusts {fingerprint}", file=sys.stderr)
    emit(_shown(ledger, where), None)
    return 0


def _shown(ledger: Any, where: Any) -> dict[str, Any]:
    """What ``ledger show`` prints: the ledger (no password) and its head, and each data set."""
    now = ledger.state(where)
    head = None if now.head is None else {"row": now.head.seq, "sha256": now.head.sha256}
    datasets = {
        key: {
            **fixed.to_dict(),
            "keyed_by": {"sensitive": "the sensitive data's identity", "rows": "the problem's rows"}.get(
                fixed.identity, "an earlier ledger layout's key (migrated by the next release on this data)"
            ),
            "spent_epsilon": ledger.spent(now.entries, key, problem_sha256="", delta=fixed.delta),
            "releases": sum(e.data_sha256 == key for e in now.entries),
            "open_reservations": [e.id for e in now.entries if e.data_sha256 == key and e.status == "reserved"],
            "kinds": sorted({e.kind or "unknown" for e in now.entries if e.data_sha256 == key}),
            "unit": sorted(
                {"user level" if e.user_level else "example level" for e in now.entries if e.data_sha256 == key}
            ),
        }
        for key, fixed in now.datasets.items()
    }
    return {"ledger": where.shown, "head": head, "trusted_keys": sorted(now.trusted), "datasets": datasets}


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
    release_cmd.add_argument("--ledger", help=LEDGER_HELP)
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
    check.add_argument("--ledger", help=LEDGER_HELP)
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
        "the privacy ledger: show, verify, change a cap, import, recover, withdraw, trust a key",
        "dpaudit-mix ledger show",
        "dpaudit-mix ledger verify --ledger postgresql://dp@127.0.0.1:5432/ledger",
        "dpaudit-mix ledger set-budget 3f9a2c1e --epsilon 8",
        "dpaudit-mix ledger import ledger.json",
        "dpaudit-mix ledger withdraw 0f3c9e2a --why 'the machine lost power before the audit'",
        "dpaudit-mix ledger trust-key other-machine.pem",
    )
    book.add_argument(
        "action",
        choices=("show", "verify", "set-budget", "import", "recover", "withdraw", "trust-key"),
        help="show every data set; verify the chain (exit 3 at the first broken row); set-budget DATA; import "
        "FILE (a JSON ledger); recover FOLDER (a published release's lost commit); withdraw ID (a reservation that "
        "published nothing); trust-key FILE (another machine's public key)",
    )
    book.add_argument(
        "target", nargs="?", help="the data set's digest (8+ characters), the file, the folder or the reservation id"
    )
    book.add_argument("--epsilon", type=finite, help="set-budget: the new cap on the data set's epsilon (in nats)")
    book.add_argument("--no-cap", action="store_true", help="set-budget: remove the cap")
    book.add_argument("--why", help="withdraw: why the reservation published nothing (recorded in its row)")
    book.add_argument("--ledger", help=LEDGER_HELP)
    book.set_defaults(func=cmd_ledger)

    for p in (release_cmd, check):
        add_json(p)
