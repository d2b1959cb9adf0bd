"""The documentation cannot rot: the how-to guides' Python blocks run as written (each page's
blocks in order, in one namespace), every `dpaudit-mix` line in the guides and the README parses,
the generated references cover every command, option and spec key, and the README stays short.
(Blocks marked py, not python, are signature sketches, with your own functions in place of my_*.)"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dpaudit_mix.cli import build_parser

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS))
hooks = importlib.import_module("hooks")


def _blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


GUIDES_WITH_PYTHON = sorted(p for p in (DOCS / "guides").glob("*.md") if _blocks(p, "python"))


def test_the_guides_with_python_are_the_expected_ones() -> None:
    assert {p.name for p in GUIDES_WITH_PYTHON} >= {"python.md", "one-run.md"}


@pytest.mark.parametrize("page", GUIDES_WITH_PYTHON, ids=lambda p: p.name)
def test_a_guides_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # what a guide writes (reports/…) lands here
    namespace: dict[str, object] = {}
    for block in _blocks(page, "python"):
        exec(compile(block, str(page), "exec"), namespace)
    if page.name == "python.md":
        assert namespace["result"].violation is False  # type: ignore[attr-defined]
    if page.name == "one-run.md":
        assert namespace["audit"].accounted is not None  # type: ignore[attr-defined]
        assert (tmp_path / "reports" / "one-run" / "canary_scores.png").is_file()


def _command_lines(path: Path) -> list[str]:
    """Every `dpaudit-mix …` line of a page's bash blocks, comments dropped, continuations joined."""
    found = []
    for block in _blocks(path, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].split(" # ")[0].strip()
            if line.startswith("dpaudit-mix "):
                found.append(line)
    return found


def test_every_command_line_in_the_docs_and_readme_parses() -> None:
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    lines = [(p.name, line) for p in pages for line in _command_lines(p)]
    assert len(lines) >= 30
    for name, line in lines:
        try:
            build_parser().parse_args(shlex.split(line)[1:])
        except Exception as exc:  # a usage error is an InputError
            pytest.fail(f"{name}: {line!r} does not parse: {exc}")


def test_the_cli_reference_names_every_command_and_option() -> None:
    page = hooks.cli_page()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        assert f"## `{name}`" in page
        for action in parser._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                assert f"`{', '.join(action.option_strings)}" in page, (name, action.option_strings)


def test_the_spec_reference_gives_every_key_a_type_default_and_meaning() -> None:
    page = hooks.specs_page()
    for _, module, name in hooks.SPECS:
        for field in dataclasses.fields(getattr(importlib.import_module(module), name)):
            if not field.init or field.name.startswith("_"):
                continue
            row = re.search(rf"^\| `{field.name}` \| `[^`]+` \| [^|]+ \| (.+) \|$", page, flags=re.M)
            assert row and row.group(1).strip(), (name, field.name)


def test_the_readme_is_short_and_maps_the_site() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).exists(), target


def test_the_site_browses_from_disk(tmp_path: Path) -> None:
    """Built as `make docs` builds it, every page is a file: each relative link of the start page
    (and of a guide one folder down) resolves to a file on disk, never to a bare folder listing."""

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        check=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    for page in (site / "index.html", site / "guides" / "one-run.html"):
        links = set(re.findall(r'href="([^"#?]+)', page.read_text(encoding="utf-8")))
        relative = sorted(link for link in links if "://" not in link and not link.startswith("mailto:"))
        assert relative, page
        missing = [link for link in relative if not (page.parent / link).resolve().is_file()]
        assert missing == [], f"{page.name}: {missing}"


def test_contributing_names_only_paths_that_exist() -> None:
    """CONTRIBUTING says only what is true: every file or folder it names is in the repository
    (a folder of the package by its name there, as "each folder of `dpaudit_mix/`" reads)."""
    root = Path(__file__).parent.parent
    text = (root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    named = {
        token for token in re.findall(r"`([\w./-]+)`", text) if "/" in token or token.endswith((".py", ".md", ".toml"))
    }
    assert len(named) > 10  # it names the places a contributor goes
    missing = [token for token in named if not ((root / token).exists() or (root / "dpaudit_mix" / token).is_dir())]
    assert sorted(missing) == []


#: a measured figure as the docs print one: a decimal with three or more significant digits (0.324,
#: 18.4, 1,540.2), what a bench or a run prints; counts, settings (1e-5, 0.05, 10.0) and the
#: paper's two-digit figures are not taken for one.
FIGURE = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})*(?:\d*)\.\d+(?![\w.])")
RESULTS = ROOT / "bench" / "results"
#: pages whose measured figures predate bench/results (they come from long spec runs: the
#: pipelines, the audits' studies), each with how many of its figures no results file holds yet.
#: A number here may only fall: a page gains no figure typed by hand, and one moved to a results
#: file (or deleted) lowers its count, which the test then asks to be written down.
NOT_YET_FROM_RESULTS: dict[str, int] = {
    "concepts/audit.md": 30,
    "concepts/learner.md": 16,
    "concepts/pipeline.md": 8,
    "concepts/users-code.md": 4,
    "concepts/warmsyn.md": 18,
    "guides/command-line.md": 1,
    "guides/pipeline-image.md": 58,
    "guides/pipeline-text.md": 79,
    "guides/release-model.md": 7,
    "guides/verify-in-ci.md": 1,
    "guides/weight-recovery.md": 1,
    "guides/your-own-data.md": 21,
}


def _figures(text: str) -> set[str]:
    """Every measured figure of ``text``, as a normalised decimal string (no commas, no trailing zeros)."""
    found = set()
    for match in FIGURE.findall(text):
        digits = match.replace(",", "")
        if len(digits.replace(".", "").strip("0")) >= 3:
            found.add(digits.rstrip("0").rstrip(".") if "." in digits else digits)
    return found


def test_every_measured_figure_in_the_docs_comes_from_a_results_file() -> None:
    """A figure typed by hand goes stale (the one-run guide said σ/2 was caught 8 of 50 and ε_LB/ε
    = 0.324 long after the code gave 197 of 200 and 0.433): the docs quote bench/results/*.md,
    which the benches write, and include them whole where they can."""
    held = set().union(*(_figures(p.read_text(encoding="utf-8")) for p in RESULTS.glob("*.md")))
    pages = {p.relative_to(DOCS).as_posix(): p for p in DOCS.rglob("*.md")} | {"README.md": ROOT / "README.md"}
    counts = {}
    for name, path in sorted(pages.items()):
        typed = sorted(_figures(path.read_text(encoding="utf-8")) - held)
        counts[name] = len(typed)
        allowed = NOT_YET_FROM_RESULTS.get(name, 0)
        assert len(typed) <= allowed, f"{name}: figures no bench/results file holds: {typed[:12]}"
    stale = {
        name: (allowed, counts.get(name))
        for name, allowed in NOT_YET_FROM_RESULTS.items()
        if counts.get(name) != allowed
    }
    assert not stale, f"NOT_YET_FROM_RESULTS is above what the pages hold now (allowed, found): {stale}"


def test_a_figure_is_what_a_bench_prints() -> None:
    assert _figures("18.4 s, 1,540.2 ms, 0.324, ε = 10.0, δ = 1e-5, 0.05, v2.13.0, 0.49, 3.10") == {
        "18.4",
        "1540.2",
        "0.324",
    }
