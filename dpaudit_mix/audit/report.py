"""Audit reports: audit.json, report.md and a self-contained report.html with seaborn figures."""

from __future__ import annotations

import base64
import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from ..atomic import atomic_path, write_json, write_text  # noqa: E402
from .engine import AuditOutcome  # noqa: E402


def _label(canary: str, threat: str, noise: bool) -> str:
    return f"{canary} / {threat} / {'private' if noise else 'no-noise control'}"


def _save(fig: plt.Figure, path: Path) -> None:
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=90, bbox_inches="tight")
    plt.close(fig)


def _figures(outcome: AuditOutcome, out: Path) -> list[Path]:
    """Score histograms (EVAL, in vs out), ROC curves with the chosen threshold, ε_LB vs claim."""
    sns.set_theme(style="whitegrid")
    keys = list(outcome.attacks)
    evaluate = ~outcome.select
    cols = 2
    rows = -(-len(keys) // cols)
    hist, hist_axes = plt.subplots(rows, cols, figsize=(11, 3 * rows), squeeze=False)
    roc, roc_axes = plt.subplots(rows, cols, figsize=(9, 3.6 * rows), squeeze=False)
    for i, key in enumerate(keys):
        attack, scores = outcome.attacks[key]
        frame = pd.DataFrame({"score": scores[evaluate],
                              "canary": np.where(outcome.include[evaluate], "in", "out")})
        ax = hist_axes.flat[i]
        sns.histplot(frame, x="score", hue="canary", bins=40, element="step", stat="density", ax=ax)
        ax.axvline(attack.threshold, color="black", ls="--", lw=1)
        ax.set_title(_label(*key), fontsize=9)
        s_in, s_out = np.sort(scores[evaluate & outcome.include]), np.sort(scores[evaluate & ~outcome.include])
        grid = np.unique(np.concatenate([s_in, s_out, [np.inf]]))
        tpr = 1 - np.searchsorted(s_in, grid, side="left") / len(s_in)
        fpr = 1 - np.searchsorted(s_out, grid, side="left") / len(s_out)
        ax = roc_axes.flat[i]
        sns.lineplot(x=fpr, y=tpr, ax=ax, estimator=None, sort=False)
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
        ax.scatter([attack.fp / attack.negatives], [1 - attack.fn / attack.positives], color="red", zorder=3,
                   label="chosen threshold")
        ax.set(xlabel="FPR", ylabel="TPR", title=_label(*key))
        ax.title.set_fontsize(9)
        ax.legend(loc="lower right", fontsize=8)
    for ax in list(hist_axes.flat[len(keys):]) + list(roc_axes.flat[len(keys):]):
        ax.set_visible(False)
    summary = outcome.summary
    frame = pd.DataFrame([{"setting": _label(r["canary"], r["threat"], r["noise"]), "ε_LB": r["epsilon_lower_bound"]}
                          for r in summary["results"]])
    bar, ax = plt.subplots(figsize=(8, 0.45 * len(frame) + 1.2))
    sns.barplot(frame, y="setting", x="ε_LB", ax=ax, color="steelblue")
    ax.axvline(summary["claimed_epsilon"], color="red", ls="--", label=f"claimed ε = {summary['claimed_epsilon']:g}")
    ax.legend()
    paths = [out / "scores.png", out / "roc.png", out / "epsilon.png"]
    for fig, path in zip((hist, roc, bar), paths):
        _save(fig, path)
    return paths


def _table(summary: dict) -> list[list[str]]:
    rows = [["canary", "threat", "noise", "runs", "ε_LB", "FPR_ub", "FNR_ub"]]
    for r in summary["results"]:
        rows.append([r["canary"], r["threat"], "private" if r["noise"] else "σ=0 control", str(r["runs"]),
                     f"{r['epsilon_lower_bound']:.3f}", f"{r['fpr_upper']:.4f}", f"{r['fnr_upper']:.4f}"])
    return rows


def _verdict(summary: dict) -> str:
    if summary["violation"]:
        return (f"VIOLATION: a private ε_LB exceeds the claimed ε = {summary['claimed_epsilon']:g}; the mechanism "
                "or its accounting is broken.")
    return f"No violation: every private ε_LB is at most the claimed ε = {summary['claimed_epsilon']:g}."


def write_report(outcome: AuditOutcome, out: Path) -> None:
    """audit.json, report.md, report.html and PNG figures in ``out`` (each written atomically)."""
    summary = outcome.summary
    figures = _figures(outcome, out)
    rows = _table(summary)
    prob = summary["problem"]
    head = (f"Problem {prob['name']} / {prob['task']}: n = {prob['n_mixing']} mixing examples, k = {prob['k']}; "
            f"claimed (ε, δ) = ({summary['claimed_epsilon']:g}, {summary['delta']:g}); σ = "
            f"{summary['noise_multiplier']:.4g} (calibrated {summary['calibrated_noise_multiplier']:.4g}); "
            f"{summary['confidence']:.0%} Clopper–Pearson, threshold on SELECT, counts on EVAL.")
    md = ["# dpaudit-mix audit", "", head, "", f"**{_verdict(summary)}**", "",
          "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    md += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    md += [""] + [f"![{p.stem}]({p.name})" for p in figures]
    write_text(out / "report.md", "\n".join(md) + "\n")
    images = "".join(
        f'<h2>{p.stem}</h2><img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in figures)
    table = "<table>" + "".join(
        "<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{html.escape(c)}</{'th' if i == 0 else 'td'}>" for c in r) + "</tr>"
        for i, r in enumerate(rows)) + "</table>"
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>dpaudit-mix audit</title><style>"
            "body{font-family:sans-serif;max-width:1000px;margin:auto}td,th{padding:2px 8px;border-bottom:1px solid #ccc}"
            f"img{{max-width:100%}}</style></head><body><h1>dpaudit-mix audit</h1><p>{html.escape(head)}</p>"
            f"<p><b>{html.escape(_verdict(summary))}</b></p>{table}{images}</body></html>")
    write_text(out / "report.html", page)
    write_json(out / "audit.json", summary)
