"""Pipeline reports: results.csv, report.md, self-contained report.html and seaborn figures.

The comparisons the paper makes are computed from the data, paired by seed: DP-MixMin against
uniform and against random search, and its distance to the non-private upper bound.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..atomic import atomic_path
from ..models.cnn import CLASSES
from ..reporting import Block, save_figure, write_pages
from ..stats import COLUMNS, finding, mean_std, paired_tests
from .spec import PipelineSpec

TASKS = tuple(f"digit-{d}" for d in range(CLASSES))


def results_frame(records: list[dict[str, Any]], composition: str) -> pd.DataFrame:
    """One row per method × ε × seed × task: per-digit AUC, macro AUC, multiclass accuracy."""
    rows = []
    for r in records:
        tasks = [(t, "auc", r["metrics"][t]) for t in TASKS]
        tasks += [("macro", "auc", r["metrics"]["macro_auc"]), ("multiclass", "accuracy", r["metrics"]["accuracy"])]
        for task, metric, value in tasks:
            rows.append(
                {
                    "method": r["method"],
                    "epsilon": r["epsilon"],
                    "seed": r["seed"],
                    "task": task,
                    "metric": metric,
                    "value": value,
                    "epsilon_total": r["epsilon_total"],
                    "delta_total": r["delta_total"],
                    "releasable": r["releasable"],
                    "composition": composition,
                }
            )
    frame = pd.DataFrame(rows)
    base = frame[frame["method"] == "no_pretrain"].set_index(["epsilon", "seed", "task"])["value"]
    index = pd.MultiIndex.from_frame(frame[["epsilon", "seed", "task"]])
    reference = base.reindex(index).to_numpy()
    frame["relative_gain"] = (frame["value"].to_numpy() - reference) / reference
    return frame


def _summary_table(frame: pd.DataFrame) -> list[list[str]]:
    rows = [["method", "ε", "macro AUC", "accuracy", "total (ε, δ)", "releasable"]]
    for (method, eps), group in frame.groupby(["method", "epsilon"], sort=False):
        macro = group[group["task"] == "macro"]["value"]
        acc = group[group["task"] == "multiclass"]["value"]
        total = group["epsilon_total"].max()
        rows.append(
            [
                method,
                f"{eps:g}",
                mean_std(macro),
                mean_std(acc),
                "not private" if math.isinf(total) else f"({total:.3f}, {group['delta_total'].iloc[0]:g})",
                "yes" if group["releasable"].all() else "NO (upper bound)",
            ]
        )
    return rows


def paired_differences(frame: pd.DataFrame, method: str, other: str) -> pd.DataFrame:
    """Macro AUC of ``method`` minus ``other``, paired by (ε, seed), tested per ε (:mod:`..stats`)."""
    macro = frame[frame["task"] == "macro"].pivot_table(index=["epsilon", "seed"], columns="method", values="value")
    if method not in macro or other not in macro:  # a spec may ask for any subset of methods
        return pd.DataFrame(columns=COLUMNS)
    return paired_tests({eps: diff.to_numpy() for eps, diff in (macro[method] - macro[other]).groupby(level="epsilon")})


def _findings(frame: pd.DataFrame) -> list[str]:
    return [
        finding(eps, row, label, "macro AUC difference", "+.4f")
        for other, label in (
            ("uniform", "uniform"),
            ("random_search", "random search"),
            ("no_pretrain", "no pretraining"),
            ("nonprivate_mixmin", "the non-private upper bound"),
        )
        for eps, row in paired_differences(frame, "dpmixmin", other).iterrows()
    ]


def _choice_table(records: list[dict[str, Any]]) -> list[list[str]]:
    """The finetune learning rate and epochs each run chose on the public validation slice."""
    chosen: dict[tuple[str, float], list[str]] = {}
    for r in records:
        c = r["finetune_choice"]
        chosen.setdefault((r["method"], r["epsilon"]), []).append(f"{c['learning_rate']:g}/{c['epochs']}")
    return [["method", "ε", "learning rate / epochs, by seed"]] + [
        [method, f"{eps:g}", ", ".join(values)] for (method, eps), values in chosen.items()
    ]


def _lambda_table(records: list[dict[str, Any]], sources: list[str]) -> list[list[str]]:
    rows = [["method", "ε", *sources]]
    seen = set()
    for r in records:
        weights = r["mixture"]["weights"]
        key = (r["method"], r["epsilon"] if r["mixture"]["phase"] else None)
        if weights is None or r["seed"] != 0 or key in seen:
            continue
        seen.add(key)
        rows.append([r["method"], f"{r['epsilon']:g}" if key[1] is not None else "any", *[f"{w:.2f}" for w in weights]])
    return rows


def _figures(frame: pd.DataFrame, out: Path) -> list[Path]:
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    macro = frame[frame["task"] == "macro"]
    sns.lineplot(macro, x="epsilon", y="value", hue="method", marker="o", errorbar="sd", ax=ax)
    ax.set(
        xscale="log", xlabel="ε (total)", ylabel="macro AUC (test)", title="Macro AUC against ε, mean ± std over seeds"
    )
    ax.set_xticks(sorted(macro["epsilon"].unique()), [f"{e:g}" for e in sorted(macro["epsilon"].unique())])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    paths = [save_figure(fig, out / "macro_auc_vs_epsilon.png")]
    eps = float(np.min(frame["epsilon"]))
    gains = frame[(frame["epsilon"] == eps) & frame["task"].isin(TASKS) & (frame["method"] != "no_pretrain")]
    if gains["relative_gain"].notna().any():
        fig, ax = plt.subplots(figsize=(10, 4.2))
        sns.barplot(gains, x="task", y="relative_gain", hue="method", errorbar="sd", ax=ax)
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:+.0%}"))
        ax.set(ylabel="AUC gain over no pretraining", title=f"Per-task relative gain at ε = {eps:g}")
        paths.append(save_figure(fig, out / "relative_gain.png"))
    return paths


def write_pipeline_report(
    records: list[dict[str, Any]], spec: PipelineSpec, sources: list[str], out: Path
) -> pd.DataFrame:
    """results.csv, report.md, report.html and the figures in ``out``; returns the results frame."""
    frame = results_frame(records, spec.composition)
    with atomic_path(out / "results.csv", suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)
    head = (
        f"World {spec.world}, seed {spec.seed}: {len(sources)} public sources, split A = ρ = {spec.rho:g} of the "
        f"sensitive training set; {spec.composition} composition"
        + (f" (mixture gets {spec.mix_share:g} of ε alone)" if spec.composition == "sequential" else "")
        + f"; δ = {spec.delta:g}; seeds: {spec.seeds}. Finetune: Opacus DP-SGD, Poisson sampling, "
        + (
            f"{spec.finetune_epochs} epochs at learning rate {spec.finetune_learning_rate:g}"
            if len(spec.finetune_grid) == 1
            else f"learning rate and epochs chosen per run from {len(spec.finetune_grid)} candidates on the public "
            "validation slice"
        )
        + f", expected batch {spec.finetune_batch}, C = {spec.finetune_clip:g}. p-values: two-sided paired "
        "t-tests over seeds (statsmodels), Holm-corrected across ε per comparison."
    )
    blocks: list[Block] = [("p", head), ("table", _summary_table(frame)), ("h2", "What the data says")]
    blocks += [("p", line) for line in _findings(frame)]
    blocks += [("p", "nonprivate_mixmin picks λ from all private data: an upper bound, NOT releasable.")]
    if len(spec.finetune_grid) > 1:
        blocks += [
            ("h2", "Finetune hyper-parameters, chosen on the public validation slice (no privacy spent)"),
            ("table", _choice_table(records)),
        ]
    blocks += [("h2", "Mixture weights λ (seed 0)"), ("table", _lambda_table(records, sources))]
    blocks += [("figure", path) for path in _figures(frame, out)]
    write_pages(out, "dpaudit-mix pipeline (image track)", blocks)
    return frame
