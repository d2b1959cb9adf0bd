"""verify-accountant: the package's accountants, calibration, the learner's noise and an audit,
checked (exit 3 on a failure)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..base.atomic import check_output, write_text
from ..base.errors import EXIT_VIOLATION
from .common import Parser, command


def cmd_verify(args: argparse.Namespace) -> int:
    from ..verification.checks import FULL, QUICK
    from ..verification.suite import verify, write_verification

    level = QUICK if args.quick else FULL
    out = check_output(args.out or Path("reports") / "verify", folder=True)
    junit = None if args.junit is None else check_output(args.junit, folder=False)
    verification = verify(level, self_test=args.self_test)
    write_verification(verification, out)
    if junit is not None:
        from ..verification.junit import junit_xml

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


def commands(sub: argparse._SubParsersAction[Parser]) -> None:
    verify_cmd = command(
        sub,
        "verify-accountant",
        "check accountants, calibration, the learner's noise and an audit (exit 3 on failure)",
        "dpaudit-mix verify-accountant --quick --junit verify.xml",
        "dpaudit-mix verify-accountant --self-test",
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
