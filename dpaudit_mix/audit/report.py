"""Audit reports: audit.json, report.md and a self-contained report.html with seaborn figures."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..atomic import write_json
from ..reporting import save_figure, write_pages
from .engine import AuditOutcome


def _label(canary: str, threat: str, noise: bool) -> str:
    return f"{canary} / {threat} / {'private' if noise else 'no-noise control'}"


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
        save_figure(fig, path)
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
    prob = summary["problem"]
    head = (f"Problem {prob['name']} / {prob['task']}: n = {prob['n_mixing']} mixing examples, k = {prob['k']}; "
            f"claimed (ε, δ) = ({summary['claimed_epsilon']:g}, {summary['delta']:g}); σ = "
            f"{summary['noise_multiplier']:.4g} (calibrated {summary['calibrated_noise_multiplier']:.4g}); "
            f"{summary['confidence']:.0%} Clopper–Pearson, threshold on SELECT, counts on EVAL.")
    blocks = [("p", head), ("strong", _verdict(summary)), ("table", _table(summary))]
    blocks += [("figure", path) for path in _figures(outcome, out)]
    write_pages(out, "dpaudit-mix audit", blocks)
    write_json(out / "audit.json", summary)
