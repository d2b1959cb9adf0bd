"""verify-accountant --junit: the XML parses, carries the attributes Ant's junit.xsd requires,
and has one test case per check and per mutant, failed exactly where the verification failed."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from dpaudit_mix.verification.checks import CheckResult
from dpaudit_mix.verification.junit import junit_xml
from dpaudit_mix.verification.suite import MutantResult, SelfTest, Verification

SUITE_REQUIRED = {"name", "tests", "failures", "errors", "time", "timestamp", "hostname"}
CASE_REQUIRED = {"name", "classname", "time"}


def _verification() -> Verification:
    checks = (
        CheckResult("cross_accountant", True, "9 points agree", ({"passed": True, "why": "σ=1 q=1: ok"},), 1.5),
        CheckResult("monotonicity", False, "1 of 1 cases fail", ({"passed": False, "why": "rdp: ε rises"},), 0.25),
    )
    mutants = (
        MutantResult(
            "sigma_halved", "half the noise", ("wiring",), ("noise_conformance",), {"noise_conformance": "0.25"}
        ),
        MutantResult("partial_noise", "half the coordinates", ("learner",), (), {}),
    )
    return Verification("quick", checks, 2.0, SelfTest(mutants))


def test_junit_is_valid_and_names_each_failure():
    text = junit_xml(_verification())
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>')
    root = ET.fromstring(text.split("\n", 1)[1])
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["verify-accountant.quick", "verify-accountant.self-test"]
    for suite in suites:
        assert set(suite.attrib) >= SUITE_REQUIRED
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        assert all(set(c.attrib) >= CASE_REQUIRED for c in cases)
    checks, mutants = ({c.get("name"): c for c in s.findall("testcase")} for s in suites)
    assert checks["cross_accountant"].find("failure") is None and checks["cross_accountant"].get("time") == "1.50"
    assert checks["monotonicity"].find("failure").get("message") == "1 of 1 cases fail"
    assert "FAIL: rdp: ε rises" in checks["monotonicity"].find("failure").text
    assert mutants["sigma_halved"].find("failure") is None
    assert "was not caught by any check" in mutants["partial_noise"].find("failure").get("message")
