"""Pipeline reports: results.csv, report.md, self-contained report.html and seaborn figures.

The comparisons the paper makes are computed from the data, paired by seed: DP-MixMin against
uniform and against random search, and its distance to the non-private upper bound.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import FuncFormatter, NullLocator

from .. import accounting
from ..base.atomic import atomic_path
from ..base.reporting import Block, save_figure, subplots, write_pages
from ..base.stats import COLUMNS, finding, mean_std, paired_tests
from ..models.cnn import CLASSES
from .methods import Mixture
from .run import ProxyReport
from .spec import PipelineSpec
from .stages import composed_privacy

TASKS = tuple(f"digit-{d}" for d in range(CLASSES))


def _record_rows(r: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(task, metric, value) of one run: a multiclass model's every digit, macro AUC and accuracy;
    a per-task model's own digit. A digit the held-out labels leave without an AUC has no row."""
    if r.get("task", "multiclass") != "multiclass":
        return [(r["task"], "auc", r["metrics"]["auc"])]
    rows = [(t, "auc", r["metrics"][t]) for t in TASKS if t in r["metrics"]]
    return rows + [("macro", "auc", r["metrics"]["macro_auc"]), ("multiclass", "accuracy", r["metrics"]["accuracy"])]


def results_frame(records: list[dict[str, Any]], composition: str) -> pd.DataFrame:
    """One row per method × ε × seed × task: per-digit AUC, macro AUC, multiclass accuracy (per
    task: each digit's own model's AUC, and their mean as the macro AUC)."""
    rows = []
    for r in records:
        for task, metric, value in _record_rows(r):
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
    if "macro" not in set(frame["task"]):  # per task: the macro AUC is the mean over the digits' models
        keys = ["method", "epsilon", "seed"]
        macro = frame.groupby(keys, sort=False).agg(
            value=("value", "mean"),
            epsilon_total=("epsilon_total", "max"),
            delta_total=("delta_total", "first"),
            releasable=("releasable", "all"),
        )
        macro = macro.reset_index().assign(task="macro", metric="auc", composition=composition)
        frame = pd.concat([frame, macro[frame.columns]], ignore_index=True)
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
                mean_std(acc) if len(acc) else "— (binary models)",
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
    """DP-MixMin against each baseline, then the premise itself: the non-private λ★ against
    uniform (what the best mixture could gain at all)."""
    pairs = [
        ("dpmixmin", other, "DP-MixMin", label)
        for other, label in (
            ("uniform", "uniform"),
            ("random_search", "random search"),
            ("no_pretrain", "no pretraining"),
            ("nonprivate_mixmin", "the non-private upper bound"),
        )
    ]
    pairs.append(("nonprivate_mixmin", "uniform", "The non-private λ★", "uniform"))
    return [
        finding(eps, row, label=label, quantity="macro AUC difference", value="+.4f", subject=subject)
        for method, other, subject, label in pairs
        for eps, row in paired_differences(frame, method, other).iterrows()
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
    """λ of seed 0 per method (per ε when private), and per task under the per-task protocol."""
    per_task = any(r.get("task", "multiclass") != "multiclass" for r in records)
    rows = [["method", *(["task"] if per_task else []), "ε", *sources]]
    seen = set()
    for r in records:
        weights = r["mixture"]["weights"]
        key = (r["method"], r.get("task"), r["epsilon"] if r["mixture"]["phase"] else None)
        if weights is None or r["seed"] != 0 or key in seen:
            continue
        seen.add(key)
        eps = f"{r['epsilon']:g}" if key[2] is not None else "any"
        rows.append([r["method"], *([r["task"]] if per_task else []), eps, *[f"{w:.2f}" for w in weights]])
    return rows


def _per_task_privacy(records: list[dict[str, Any]], spec: PipelineSpec) -> list[list[str]]:
    """Per method and ε: one task's release, all tasks' λ together, and everything together."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in records:
        if r["seed"] == 0:
            groups.setdefault((r["method"], r["epsilon"]), []).append(r)
    rows = [["method", "ε", "one task's λ and model", "all tasks' λ together", "all λ and models together"]]
    for (method, eps), group in groups.items():
        mixtures = [Mixture.from_dict(r["mixture"]) for r in group]
        phases = [accounting.GaussianPhase(**r["finetune_phase"]) for r in group]
        lam = tuple(m.phase for m in mixtures if m.phase)
        released = all(m.releasable for m in mixtures)
        together = composed_privacy(mixtures, phases, spec.delta, spec.composition == "sequential")
        lam_text = "0 (public λ)" if not lam else _epsilon_text(accounting.epsilon(lam, spec.delta))
        rows.append(
            [
                method,
                f"{eps:g}",
                _epsilon_text(max(r["epsilon_total"] for r in group)),
                lam_text if released else "not private",
                _epsilon_text(together.epsilon_total),
            ]
        )
    return rows


def _epsilon_text(epsilon: float) -> str:
    return "not private" if math.isinf(epsilon) else f"{epsilon:.3f}"


def _proxy_table(proxies: ProxyReport) -> list[list[str]]:
    rows = [["source", "validation accuracy", *(["epochs"] if proxies.spec.kind == "cnn" else [])]]
    for name, accuracy, epochs in zip(proxies.sources, proxies.accuracy, proxies.epochs, strict=True):
        rows.append([name, f"{accuracy:.3f}", *([str(int(epochs))] if proxies.spec.kind == "cnn" else [])])
    return rows


def _figures(frame: pd.DataFrame, out: Path) -> list[Path]:
    sns.set_theme(style="whitegrid")
    fig, ax = subplots(figsize=(6.5, 4.2))
    macro = frame[frame["task"] == "macro"]
    sns.lineplot(macro, x="epsilon", y="value", hue="method", marker="o", errorbar="sd", ax=ax)
    ax.set(
        xscale="log", xlabel="ε (total)", ylabel="macro AUC (test)", title="Macro AUC against ε, mean ± std over seeds"
    )
    ax.set_xticks(sorted(macro["epsilon"].unique()), [f"{e:g}" for e in sorted(macro["epsilon"].unique())])
    ax.xaxis.set_minor_locator(NullLocator())
    paths = [save_figure(fig, out / "macro_auc_vs_epsilon.png")]
    eps = float(np.min(frame["epsilon"]))
    gains = frame[(frame["epsilon"] == eps) & frame["task"].isin(TASKS) & (frame["method"] != "no_pretrain")]
    if gains["relative_gain"].notna().any():
        fig, ax = subplots(figsize=(10, 4.2))
        sns.barplot(gains, x="task", y="relative_gain", hue="method", errorbar="sd", ax=ax)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:+.0%}"))
        ax.set(ylabel="AUC gain over no pretraining", title=f"Per-task relative gain at ε = {eps:g}")
        paths.append(save_figure(fig, out / "relative_gain.png"))
    return paths


def write_pipeline_report(
    records: list[dict[str, Any]], spec: PipelineSpec, proxies: ProxyReport, out: Path
) -> pd.DataFrame:
    """results.csv, report.md, report.html and the figures in ``out``; returns the results frame."""
    sources = list(proxies.sources)
    frame = results_frame(records, spec.composition)
    with atomic_path(out / "results.csv", suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)
    head = (
        f"World {spec.world}, seed {spec.seed}: {len(sources)} public sources with {proxies.spec.label} proxies "
        f"(mean public validation accuracy {np.mean(proxies.accuracy):.3f}), split A = ρ = {spec.rho:g} of the "
        f"sensitive training set; {spec.protocol.replace('_', '-')} protocol"
        + (" (per digit: its own λ, pretraining and binary finetune)" if spec.protocol == "per_task" else "")
        + f"; {spec.composition} composition"
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
    if spec.protocol == "per_task":
        blocks += [
            ("h2", "Privacy of the per-task release (ε at δ; composed by PLD)"),
            (
                "p",
                "Each task's λ is fitted at ε on split A and its model finetuned at ε on split B: one task's "
                "release is at ε. Releasing every task's λ, or every λ and model, composes them:",
            ),
            ("table", _per_task_privacy(records, spec)),
        ]
    blocks += [
        ("h2", f"Proxies ({proxies.spec.label}): accuracy on the public validation slice"),
        ("table", _proxy_table(proxies)),
    ]
    blocks += [("h2", "Mixture weights λ (seed 0)"), ("table", _lambda_table(records, sources))]
    blocks += [("figure", path) for path in _figures(frame, out)]
    write_pages(out, "dpaudit-mix pipeline (image track)", blocks)
    return frame
