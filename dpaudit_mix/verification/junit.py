"""verify-accountant's result as JUnit XML (``--junit FILE``): one test case per check, and with
``--self-test`` one per mutant (a mutant no check caught is a failed case), so that any CI that
reads JUnit (GitHub Actions, GitLab, Jenkins) shows which check or mutant broke.

The attributes are those the JUnit schema (Ant's ``junit.xsd``) requires of a ``testsuite``:
name, tests, failures, errors, time, timestamp, hostname; each ``testcase`` has name, classname
and time, and a ``failure`` child with a message when it failed.
"""

from __future__ import annotations

import datetime
import socket
import xml.etree.ElementTree as ET

from .suite import Verification


def _suite(parent: ET.Element, name: str, cases: list[tuple[str, float, str | None, str]], stamp: str) -> None:
    """A testsuite of (name, seconds, failure message or None, details) cases."""
    failures = sum(message is not None for _, _, message, _ in cases)
    suite = ET.SubElement(
        parent,
        "testsuite",
        name=name,
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped="0",
        time=f"{sum(seconds for _, seconds, _, _ in cases):.2f}",
        timestamp=stamp,
        hostname=socket.gethostname(),
    )
    for case_name, seconds, message, details in cases:
        case = ET.SubElement(suite, "testcase", name=case_name, classname=name, time=f"{seconds:.2f}")
        if message is not None:
            ET.SubElement(case, "failure", message=message, type="AssertionError").text = details
        else:
            ET.SubElement(case, "system-out").text = details


def junit_xml(verification: Verification) -> str:
    """The JUnit XML document of ``verification``."""
    stamp = datetime.datetime.now(datetime.UTC).replace(microsecond=0, tzinfo=None).isoformat()
    root = ET.Element("testsuites", name="dpaudit-mix verify-accountant")
    checks = [
        (
            c.name,
            c.seconds,
            None if c.passed else c.summary,
            "\n".join(f"{'pass' if case['passed'] else 'FAIL'}: {case['why']}" for case in c.cases),
        )
        for c in verification.checks
    ]
    _suite(root, f"verify-accountant.{verification.level}", checks, stamp)
    if verification.self_test is not None:
        mutants = [
            (
                m.name,
                0.0,
                None if m.caught else f"mutant {m.name} ({m.description}) was not caught by any check",
                f"{m.description}; caught by {', '.join(m.caught_by) or 'none'}: " + "; ".join(m.evidence.values()),
            )
            for m in verification.self_test.mutants
        ]
        _suite(root, "verify-accountant.self-test", mutants, stamp)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
