"""Report pages: one list of blocks written as report.md and a self-contained report.html.

A block is ``("h2", text)``, ``("p", text)``, ``("strong", text)``, ``("table", rows)`` (first row
the header) or ``("figure", png_path)``; the HTML embeds every figure as base64, so the page
travels alone. Figures are saved atomically like every other output.
"""

from __future__ import annotations

import base64
import contextlib
import html
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from . import owned
from .atomic import atomic_path, write_text

Block = tuple[str, Any]


def subplots(
    nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float], squeeze: bool = True
) -> tuple[Figure, Any]:
    """A figure and its axes, made without pyplot: no backend is chosen and no global figure
    state is touched, so a report written from a notebook leaves the notebook's plots alone."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, squeeze=squeeze)


def save_figure(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=90, bbox_inches="tight")
    return path


#: what each figure the package draws shows, said to a reader who cannot see it (its alt text).
FIGURE_TEXT = {
    "tradeoff": "trade-off curves: the claimed mechanism's curve and the attacks' Clopper–Pearson points, "
    "false-positive rate against false-negative rate",
    "scores": "histograms of the attack's scores on canary-in and canary-out runs, with the chosen threshold",
    "roc": "ROC curves of each attack on log–log axes with 95% Clopper–Pearson bands, each private run beside "
    "its σ = 0 control, with the chosen threshold",
    "epsilon": "bar chart of each setting's certified ε lower bound against the claimed ε",
    "lambda": "bar chart of the released mixture weights λ, one bar per public source",
    "macro_auc_vs_epsilon": "the finetuned models' macro AUC against ε, one line per method, mean ± std over seeds",
    "relative_gain": "each method's gain over uniform mixing against ε, with paired-test intervals",
    "perplexity_vs_epsilon": "the text models' perplexity against ε, one line per method, mean ± std over seeds",
    "cos_heatmap": "heat maps of cos(λ, λ★) over ε and ρ",
    "alpha_vs_k": "recovery of λ★ against the number of sources k",
    "ablation": "WarmSyn ablation: accuracy of each warm-up against ε",
    "canary_scores": "histograms of one training run's canary scores, members (in) against non-members (out), "
    "one panel per setting (an audit's private runs beside their σ = 0 controls)",
    "card": "bar charts of the released model's pretraining mixture λ per source and of its metrics beside "
    "the pretrained model's before its finetune, with chance marked",
    "map": "the map: DP-MixMin minus uniform over bad sources, pretraining size and finetune rows",
}


def figure_text(path: Path) -> str:
    """The alt text of a figure file (its stem's entry in FIGURE_TEXT, else its name in words)."""
    return FIGURE_TEXT.get(path.stem, f"figure: {path.stem.replace('_', ' ')}")


def _markdown(title: str, blocks: list[Block], out: Path) -> str:
    lines = [f"# {title}", ""]
    for kind, value in blocks:
        if kind == "table":
            lines += ["| " + " | ".join(value[0]) + " |", "|" + "---|" * len(value[0])]
            lines += ["| " + " | ".join(row) + " |" for row in value[1:]]
        elif kind == "figure":
            lines.append(f"![{figure_text(value)}]({os.path.relpath(value, out)})")
        else:
            lines.append({"h2": "## {}", "p": "{}", "strong": "**{}**"}[kind].format(value))
        lines.append("")
    return "\n".join(lines)


def _html(title: str, blocks: list[Block]) -> str:
    parts = []
    for kind, value in blocks:
        if kind == "table":
            cells = [
                "<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in row) + "</tr>"
                for tag, row in (("th" if i == 0 else "td", row) for i, row in enumerate(value))
            ]
            parts.append("<div class='wide'><table>" + "".join(cells) + "</table></div>")
        elif kind == "figure":
            data = base64.b64encode(value.read_bytes()).decode()
            parts.append(f'<img alt="{html.escape(figure_text(value))}" src="data:image/png;base64,{data}">')
        else:
            parts.append(f"<{kind}>{html.escape(str(value))}</{kind}>")
    style = (  # a phone's width: the page wraps, a table's cells tighten, a wider one scrolls in its own box
        "body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 8px;overflow-wrap:anywhere}"
        "td,th{padding:2px 8px;border-bottom:1px solid #ccc;text-align:right;overflow-wrap:normal}"
        "img{max-width:100%;height:auto}.wide{overflow-x:auto}"
        "@media (max-width:480px){td,th{padding:2px 3px;font-size:0.85em}th{overflow-wrap:anywhere}}"
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{''.join(parts)}</body></html>"
    )


#: the libraries a report's numbers rest on, named with their versions at its foot.
DEPENDENCIES = ("numpy", "scipy", "statsmodels", "torch", "opacus", "dp-accounting")


def versions_line() -> str:
    """Which code made the page: this package's version, Python's and each of DEPENDENCIES'."""
    import platform
    from importlib import metadata

    from .version import __version__

    def installed(name: str) -> str:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            return f"{name} not installed"

    libraries = ", ".join(installed(name) for name in DEPENDENCIES)
    return f"Made by dpaudit-mix {__version__} on Python {platform.python_version()} with {libraries}."


def write_pages(out: Path, title: str, blocks: list[Block], name: str = "report") -> None:
    """NAME.md and NAME.html in ``out``, each ending with :func:`versions_line`.

    The figures each page shows are recorded with their digests (:mod:`.owned`); a rerun into
    the same folder removes the last run's figures it no longer shows, where they are still what
    it wrote, so no stale figure sits beside the report and no one else's file is touched.
    """
    blocks = [*blocks, ("p", versions_line())]
    write_text(out / f"{name}.md", _markdown(title, blocks, out))
    write_text(out / f"{name}.html", _html(title, blocks))
    owned.replace(out, name, [Path(value) for kind, value in blocks if kind == "figure"])


@contextlib.contextmanager
def progress_steps(total: int, desc: str, *, delay: float = 0.0, show: bool = True) -> Iterator[Callable[[str], None]]:
    """A progress bar of a computation's named steps on stderr: the caller's ``step(name)`` says a
    step starts (so the one before it is done, and the bar names the one running); the block's
    end completes it. ``delay``: seconds before it shows (tqdm's), so quick calls stay silent."""
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit="step", delay=delay, disable=not show, file=sys.stderr) as bar:
        started: list[str] = []

        def step(name: str) -> None:
            bar.update(len(started) > bar.n)
            started.append(name)
            bar.set_postfix_str(name)

        yield step
        bar.update(len(started) - bar.n)
