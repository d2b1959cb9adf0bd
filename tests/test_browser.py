"""The reports as a person reads them: the demo's audit report and release card, a model release's
card, a one-run audit's report and a weight-recovery report, opened in Debian's Chromium through Playwright, offline.

Each page: no console error, every image loaded with alt text, every link resolving inside the
page or beside it, no address outside the machine, and readable at a phone's 375 px (nothing wider
than the screen but a table scrolling in its own box); a screenshot of each is kept in the test's
tmp folder. Skipped where /usr/bin/chromium is missing (`make chromium` installs it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpaudit_mix import accounting, demo
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, save
from dpaudit_mix.release import gate

from .conftest import random_problem
from .test_model_release import BARE, _specs

CHROMIUM = Path("/usr/bin/chromium")
#: Chromium's flags for a closed network (no background connections) as root in a container.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 375, "height": 812}
#: the most columns a report's table may have and still be required to fit a phone's width whole.
FITS_COLUMNS = 6

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (make chromium)"),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pages under test, each made as a user makes it."""
    root = tmp_path_factory.mktemp("pages")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(demo, "OUT", root / "demo")
        assert demo.main() == 0
        patch.setattr(gate, "VERIFY_LEVEL", BARE)
        patch.setenv("DPAUDIT_MIX_LEDGER", str(root / "ledger.sqlite"))
        assert main(["release", str(_specs(root)), "--out", str(root / "model")]) == 0
    draws = stream(0, "simulated-scores", test="browser").numpy()
    member = draws.random(2000) < 0.5
    scores = np.where(member, 0.3, 0.0) + draws.standard_normal(2000)
    np.savez(root / "canaries.npz", scores=scores, membership=member.astype(int))
    sigma = accounting.calibrate(2.0, 1e-5, 1.0, 1)
    phase = ["--noise-multiplier", repr(sigma), "--sample-rate", "1", "--steps", "1"]
    epsilon = repr(accounting.epsilon([accounting.GaussianPhase(sigma, 1.0, 1)], 1e-5))
    claim = ["--epsilon", epsilon, "--delta", "1e-5", *phase]
    assert main(["audit-scores", str(root / "canaries.npz"), "--one-run", *claim, "--out", str(root / "one")]) == 0
    toy = random_problem(600, 6, seed=21, users=True)
    save(Problem(toy.logp, toy.sources, users=toy.users, task="toy"), root / "toy.npz")
    (root / "recovery.toml").write_text(
        f'problem = "{root / "toy.npz"}"\nepsilons = [0.3, 10.0]\nrhos = [0.2, 1.0]\nseeds = 8\nsteps = 40\n'
        'user_level_tasks = ["toy"]\nk_values = [2, 4, 6]\nk_fit_min = 2\n'
    )
    assert main(["recovery", str(root / "recovery.toml"), "--out", str(root / "recovery")]) == 0
    return {
        "recovery report": root / "recovery" / "report.html",
        "demo report": root / "demo" / "report.html",
        "release card": root / "demo" / "release" / "release.html",
        "model card": root / "model" / "release.html",
        "one-run report": root / "one" / "report.html",
    }


def _read(browser: Any, page_file: Path, shot: Path, viewport: dict[str, int]) -> dict[str, Any]:
    """Open ``page_file`` offline at ``viewport``; what a reader would meet, and a screenshot."""
    context = browser.new_context(viewport=viewport, offline=True)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url}"))
    page.goto(page_file.as_uri(), wait_until="load")
    seen = page.evaluate(
        """(fits) => ({
        images: [...document.images].map(i => ({ok: i.complete && i.naturalWidth > 0, alt: i.alt})),
        links: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
        ids: [...document.querySelectorAll('[id]')].map(e => e.id),
        sources: [...document.querySelectorAll('[src],[href]')]
            .map(e => e.getAttribute('src') || e.getAttribute('href')),
        overflow: document.documentElement.scrollWidth - window.innerWidth,
        clipped: [...document.querySelectorAll('.wide')].filter(e => e.scrollWidth > e.clientWidth + 1 &&
            e.querySelector('tr').children.length <= fits).map(e => e.innerText.slice(0, 40)),
        wide: [...document.querySelectorAll('body *')].filter(e => !e.closest('.wide') &&
            e.getBoundingClientRect().right > window.innerWidth + 1).map(e => e.tagName),
        text: document.body.innerText,
        font: parseFloat(getComputedStyle(document.body).fontSize),
    })""",
        FITS_COLUMNS,
    )
    page.screenshot(path=str(shot), full_page=True)
    context.close()
    return {**seen, "problems": problems}


def test_the_reports_read_in_a_real_browser(browser: Any, pages: dict[str, Path], tmp_path: Path) -> None:
    """One test, so one worker makes the pages (two demos at once would contend for one cache)."""
    for name, page_file in pages.items():
        _check_page(browser, name, page_file, tmp_path)


def _check_page(browser: Any, name: str, page_file: Path, tmp_path: Path) -> None:
    for label, viewport in (("desktop", {"width": 1280, "height": 900}), ("phone", PHONE)):
        shot = tmp_path / f"{name.replace(' ', '-')}-{label}.png"
        seen = _read(browser, page_file, shot, viewport)
        assert seen["problems"] == [], (name, label)
        assert seen["images"] and all(i["ok"] and len(i["alt"]) > 20 for i in seen["images"]), (name, seen["images"])
        assert not [s for s in seen["sources"] if re.match(r"^(https?:)?//", s or "")], (name, "an outside address")
        for link in seen["links"]:
            if link.startswith("#"):
                assert link[1:] in seen["ids"], (name, link)
            elif not link.startswith("data:"):
                assert (page_file.parent / link.split("#")[0]).exists(), (name, link)
        if label == "phone":
            assert seen["overflow"] <= 1 and seen["wide"] == [], (name, seen["overflow"], seen["wide"][:5])
            # a table of up to FITS_COLUMNS columns fits a phone's width whole (its cells tighten: the
            # release card's audit table had its last column cut at the edge); a wider one scrolls in its box
            assert seen["clipped"] == [], (name, seen["clipped"])
            assert seen["font"] >= 12, (name, seen["font"])
        assert shot.stat().st_size > 10_000
    # what a reviewer signs: the claim and its accountant, and (for audits) what the audit could catch
    text = seen["text"]
    assert "Made by dpaudit-mix" in text and "opacus" in text, name  # the versions behind the numbers
    assert "ε" in text and ("pld" in text.lower() or "accountant" in text.lower()), name
    if name == "one-run report":
        assert "σ = " in text and "q = 1" in text and "T = 1" in text and "m = 2000 canaries" in text
    if name in ("demo report", "one-run report"):
        assert re.search(r"catch|power", text, flags=re.I), name
    if name == "recovery report":  # the paired tests behind each mark, and the marks they earned
        assert "Holm p" in text and "Wilcoxon p" in text and "95% CI" in text and "▲" in text
        assert "Table 11" in text and "Low power" not in text
    if name == "release card":
        released = json.loads(page_file.with_name("release.json").read_text())
        assert released["audit"]["power"]["detects"] and "released λ" in text
        assert all(f"{w:.4f}" in text for w in released["weights"])  # λ as numbers, beside its bars
