"""Text pipeline reports: results.csv, report.md, report.html and a figure (the paper's Table 1
shape: test perplexity per method and ε, and DP-MixMin's relative reduction against each
baseline, paired by seed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import NullLocator

from ..base.atomic import atomic_path
from ..base.reporting import Block, save_figure, subplots, write_pages
from ..base.stats import COLUMNS, finding, mean_std, paired_tests
from .spec import TextPipelineSpec

COMPARED = (
    ("uniform", "uniform"),
    ("random_search", "random search"),
    ("no_pretrain", "no pretraining"),
    ("nonprivate_mixmin", "the non-private upper bound"),
)


def results_frame(records: list[dict[str, Any]], composition: str) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "method": r["method"],
                "epsilon": r["epsilon"],
                "seed": r["seed"],
                "perplexity": r["perplexity"],
                "pretrained_perplexity": r["pretrained_perplexity"],
                "epsilon_total": r["epsilon_total"],
                "delta_total": r["delta_total"],
                "releasable": r["releasable"],
                "composition": composition,
            }
            for r in records
        ]
    )


def relative_reduction(frame: pd.DataFrame, method: str, other: str) -> pd.DataFrame:
    """(ppl_other − ppl_method) / ppl_other per (ε, seed), tested against 0 per ε (paired by seed)."""
    ppl = frame.pivot_table(index=["epsilon", "seed"], columns="method", values="perplexity")
    if method not in ppl or other not in ppl:  # a spec may ask for any subset of methods
        return pd.DataFrame(columns=COLUMNS)
    reduction = (ppl[other] - ppl[method]) / ppl[other]
    return paired_tests({eps: r.to_numpy() for eps, r in reduction.groupby(level="epsilon")})


def _summary_table(frame: pd.DataFrame) -> list[list[str]]:
    rows = [["method", "ε", "test perplexity", "before finetune", "total (ε, δ), per user", "releasable"]]
    for (method, eps), group in frame.groupby(["method", "epsilon"], sort=False):
        total = group["epsilon_total"].max()
        rows.append(
            [
                method,
                f"{eps:g}",
                mean_std(group["perplexity"]),
                mean_std(group["pretrained_perplexity"]),
                "not private" if math.isinf(total) else f"({total:.3f}, {group['delta_total'].iloc[0]:g})",
                "yes" if group["releasable"].all() else "NO (upper bound)",
            ]
        )
    return rows


def _findings(frame: pd.DataFrame) -> list[str]:
    return [
        finding(eps, row, label=label, quantity="test perplexity reduction", value="+.1%")
        for other, label in COMPARED
        for eps, row in relative_reduction(frame, "dpmixmin", other).iterrows()
    ]


def lambda_table(records: list[dict[str, Any]], sources: list[str]) -> list[list[str]]:
    """λ per source, mean ± std over seeds: λ★ (non-private MixMin on every training user) and
    each private method per ε."""
    groups: dict[tuple[str, str], list[list[float]]] = {}
    for r in records:
        weights = r["mixture"]["weights"]
        if weights is None or r["method"] == "uniform":
            continue
        label = ("λ★ (non-private)", "—") if r["method"] == "nonprivate_mixmin" else (r["method"], f"{r['epsilon']:g}")
        groups.setdefault(label, []).append(weights)
    rows = [["λ", "ε", *sources]]
    for (name, eps), values in groups.items():
        arr = np.array(values)
        if name.startswith("λ★"):
            arr = arr[:1]  # the same λ★ for every seed and ε
        rows.append([name, eps, *(f"{column[0]:.2f}" if len(arr) == 1 else mean_std(column, 2) for column in arr.T)])
    return rows


def _choice_table(records: list[dict[str, Any]]) -> list[list[str]]:
    chosen: dict[tuple[str, float], list[str]] = {}
    for r in records:
        chosen.setdefault((r["method"], r["epsilon"]), []).append(f"{r['finetune_choice']['learning_rate']:g}")
    return [["method", "ε", "learning rate, by seed"]] + [
        [m, f"{eps:g}", ", ".join(v)] for (m, eps), v in chosen.items()
    ]


def _figure(frame: pd.DataFrame, out: Path) -> Path:
    sns.set_theme(style="whitegrid")
    fig, ax = subplots(figsize=(6.5, 4.2))
    shown = frame[frame["method"] != "no_pretrain"]  # an order of magnitude above the rest
    sns.lineplot(shown, x="epsilon", y="perplexity", hue="method", marker="o", errorbar="sd", ax=ax)
    ax.set(
        xscale="log",
        xlabel="ε (total, per user)",
        ylabel="test perplexity (held-out speakers)",
        title="Perplexity against ε, mean ± std over seeds",
    )
    ax.set_xticks(sorted(shown["epsilon"].unique()), [f"{e:g}" for e in sorted(shown["epsilon"].unique())])
    ax.xaxis.set_minor_locator(NullLocator())
    return save_figure(fig, out / "perplexity_vs_epsilon.png")


def write_text_report(
    records: list[dict[str, Any]], spec: TextPipelineSpec, sources: list[str], users: dict[str, int], out: Path
) -> pd.DataFrame:
    """results.csv, report.md, report.html and the figure in ``out``; returns the results frame."""
    frame = results_frame(records, spec.composition)
    with atomic_path(out / "results.csv", suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)
    head = (
        f"World {spec.world}, seed {spec.seed}: {len(sources)} public sources; users are speakers. Split A (the "
        f"mixture's users) = ρ = {spec.rho:g} of the training speakers ({users['split_a']} users); the finetune "
        f"sees {users['finetune']} users, {spec.composition} composition"
        + (f" (mixture gets {spec.mix_share:g} of ε alone)" if spec.composition == "sequential" else "")
        + f"; the test set is {users['test']} held-out speakers. δ = {spec.delta:g}; seeds: {spec.seeds}. "
        f"Model: a character GRU pretrained on {spec.pretrain_windows} public windows sampled by λ "
        f"({spec.pretrain_epochs} epoch(s) of Adam at {spec.pretrain_learning_rate:g}"
        + (f", its last {spec.pretrain_cooldown:.0%} of steps at a tenth of it" if spec.pretrain_cooldown else "")
        + f", sequences of {spec.pretrain_length} characters, {spec.pretrain_batch} a step), then "
        f"user-level DP-SGD: {spec.finetune_steps} steps, Poisson sampling of users ({spec.finetune_users:g} "
        f"expected), each user's summed gradient clipped to C = {spec.finetune_clip:g}, accounted per user; "
        + (
            f"learning rate chosen per run from {len(spec.finetune_learning_rates)} candidates by rehearsal on "
            f"public {spec.rehearsal_genre} speakers. "
            if spec.finetune_learning_rates
            else f"learning rate {spec.finetune_learning_rate:g}. "
        )
        + "p-values: two-sided paired t-tests over seeds (statsmodels), Holm-corrected across ε per comparison."
    )
    blocks: list[Block] = [("p", head), ("table", _summary_table(frame)), ("h2", "What the data says")]
    blocks += [("p", line) for line in _findings(frame)]
    blocks += [("p", "nonprivate_mixmin picks λ from all private data: an upper bound, NOT releasable.")]
    if spec.finetune_learning_rates:
        blocks += [
            (
                "h2",
                f"Finetune learning rate, chosen by rehearsal on public {spec.rehearsal_genre} speakers "
                "(no privacy spent)",
            ),
            ("table", _choice_table(records)),
        ]
    blocks += [("h2", "Mixture weights λ per source, mean ± std over seeds"), ("table", lambda_table(records, sources))]
    blocks += [("figure", _figure(frame, out))]
    write_pages(out, "dpaudit-mix pipeline (text track, user-level DP)", blocks)
    return frame
