"""Recovery reports: recovery.json, report.md, self-contained report.html, seaborn figures.

Tables follow the paper: the ε × ρ grid pools tasks × seeds, beside it one row per task and ε
(Table 11's layout: cos★ and L1 per ρ), and α per task against k (Table 4). A mark is a test: ▲ (▼)
only where DP-MixMin is closer to (farther from) λ★ than uniform at a Holm-adjusted p below 0.05
(recovery/comparison.py), with every cell's mean difference, interval and p-values in a table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import NullLocator

from ..accounting import DEFAULT_ACCOUNTANT
from ..base.atomic import write_json
from ..base.reporting import Block, save_figure, subplots, write_pages
from ..base.stats import ALPHA, sample_std
from .comparison import BETTER, LOW_POWER_SEEDS, SMALL, WORSE, Comparison, against_uniform
from .grid import Cell, RecoveryResult

#: how each metric is named in a table, and the format of its values.
SHOWN = {"cos_star": ("cos★", ".3f"), "l1": ("L1", ".3f"), "alpha_1e3": ("α (1e-3)", ".2f")}


def pooled(cells: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (user_level, ε, ρ): metrics pooled over tasks × seeds, uniform refs averaged."""
    rows = []
    if not cells:
        return pd.DataFrame()
    frame = pd.DataFrame(cells).fillna({"epsilon": 0.0})  # the σ = 0 reference has no ε
    for (user_level, eps, rho), group in frame.groupby(["user_level", "epsilon", "rho"]):
        runs = {m: np.concatenate([g["runs"] for g in group[m]]) for m in ("cos_star", "l1", "alpha_1e3")}
        row = {"user_level": user_level, "epsilon": eps, "rho": rho, "comparisons": len(runs["cos_star"])}
        for metric, values in runs.items():
            row[metric] = values.mean()
            row[f"{metric}_std"] = sample_std(values)
        row.update(
            cos_uniform=group["cos_uniform"].mean(),
            l1_uniform=group["l1_uniform"].mean(),
            alpha_uniform_1e3=group["alpha_uniform_1e3"].mean(),
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _grid_table(
    frame: pd.DataFrame, rhos: list[float], noiseless: pd.DataFrame, marks: dict[tuple[float, float, str], str]
) -> list[list[str]]:
    """The ε × ρ grid, each value marked by its test, then the σ = 0 row: the same learner without
    noise, the bias floor (untested: not a private result)."""
    rows = [["ε"] + [f"ρ={rho:g}: cos★ / L1 / α(1e-3)" for rho in rhos]]
    for eps, group in [*frame.groupby("epsilon"), *(("σ = 0", noiseless),) * (not noiseless.empty)]:
        row = [eps if isinstance(eps, str) else f"{eps:g}"]
        for rho in rhos:
            c = group[group["rho"] == rho].iloc[0]
            mark = {m: "" if isinstance(eps, str) else marks[(float(eps), rho, m)] for m in SHOWN}
            row.append(
                f"{pm(c['cos_star'], c['cos_star_std'], c['comparisons'])}{mark['cos_star']} / "
                f"{pm(c['l1'], c['l1_std'], c['comparisons'])}{mark['l1']} / "
                f"{pm(c['alpha_1e3'], c['alpha_1e3_std'], c['comparisons'], '.1f')}{mark['alpha_1e3']}"
            )
        rows.append(row)
    return rows


def pm(mean: float, std: float, n: int, fmt: str = ".2f") -> str:
    """ "mean±std", or the mean alone where one value has no spread to estimate."""
    return f"{mean:{fmt}}±{std:{fmt}}" if n > 1 else f"{mean:{fmt}}"


def _p(value: float | None) -> str:
    return "–" if value is None or np.isnan(value) else f"{value:.2g}"


def _comparison_table(comparisons: list[Comparison]) -> list[list[str]]:
    """Every cell's paired comparison: the mean improvement with its interval and the p-values."""
    rows = [
        ["ε", "ρ", "metric", "pairs", "DP-MixMin − uniform (better > 0) [95% CI]", "t p", "Wilcoxon p", "Holm p", ""]
    ]
    for c in comparisons:
        name, fmt = SHOWN[c.metric]
        interval = "" if c.ci95 is None else f" [{c.ci95[0]:{fmt}}, {c.ci95[1]:{fmt}}]"
        rows.append(
            [f"{c.epsilon:g}", f"{c.rho:g}", name, str(c.pairs), f"{c.mean:+{fmt}}{interval}"]
            + [_p(c.p_t), _p(c.p_wilcoxon), _p(c.p_holm), c.mark]
        )
    return rows


def _task_table(cells: list[Cell], rhos: list[float]) -> list[list[str]]:
    """Table 11's layout: a row per task and ε, cos★ and L1 (mean ± std over seeds) per ρ."""
    rows = [["task", "ε"] + [f"ρ={rho:g}: {name}" for rho in rhos for name in ("cos★", "L1")]]
    at = {(c.task, c.epsilon, c.rho): c.score for c in cells}
    for task in dict.fromkeys(c.task for c in cells):
        for eps in sorted({float(c.epsilon or 0.0) for c in cells if c.task == task}):
            row = [task, f"{eps:g}"]
            for rho in rhos:
                score = at[(task, eps, rho)]
                row += [pm(m.mean, m.std, len(m.runs)) for m in (score.cos_star, score.l1)]
            rows.append(row)
    return rows


def _k_table(k_scaling: dict[str, Any]) -> list[list[str]]:
    cells = pd.DataFrame([c.to_dict() for c in k_scaling["cells"]])
    tasks = list(dict.fromkeys(cells["task"]))
    rows = [["k"] + tasks + ["avg ± std over tasks"]]
    for avg in k_scaling["average"]:
        at_k = cells[cells["k"] == avg["k"]].set_index("task")
        rows.append(
            [str(avg["k"])]
            + [pm(a["mean"], a["std"], len(a["runs"]), ".1f") for a in (at_k.loc[t, "alpha_1e3"] for t in tasks)]
            + [pm(avg["alpha_1e3_mean"], avg["alpha_1e3_std_across_tasks"], len(tasks), ".1f")]
        )
    return rows


def _heatmaps(frame: pd.DataFrame, out: Path) -> Path:
    variants = sorted(frame["user_level"].unique())
    fig, axes = subplots(1, len(variants), figsize=(5.2 * len(variants), 3.8), squeeze=False)
    for ax, user_level in zip(axes[0], variants, strict=True):
        part = frame[frame["user_level"] == user_level]
        table = part.pivot(index="epsilon", columns="rho", values="cos_star")
        sns.heatmap(table, annot=True, fmt=".2f", vmin=0, vmax=1, cmap="viridis", ax=ax)
        level = "user-level" if user_level else "example-level"
        ax.set_title(f"cos★ ({level}); uniform cos_u = {part['cos_uniform'].mean():.2f}", fontsize=10)
        ax.set(xlabel="ρ", ylabel="ε")
    return save_figure(fig, out / "cos_heatmap.png")


def _log_interval(k_scaling: dict[str, Any]) -> pd.DataFrame:
    """Per k, the geometric mean of α over tasks and its 95 % t-interval, both taken in log space
    (where the fit is), so a band on log axes never reaches zero; tasks with α ≤ 0 have no log."""
    from scipy.stats import t as t_dist

    rows = []
    for k, group in pd.DataFrame([{"k": c.k, "alpha": c.score.alpha_1e3.mean} for c in k_scaling["cells"]]).groupby(
        "k"
    ):
        logs = np.log(group["alpha"][group["alpha"] > 0].to_numpy())
        if not len(logs):
            continue
        half = t_dist.ppf(0.975, len(logs) - 1) * sample_std(logs) / np.sqrt(len(logs)) if len(logs) > 1 else 0.0
        rows.append(
            {
                "k": k,
                "centre": np.exp(logs.mean()),
                "low": np.exp(logs.mean() - half),
                "high": np.exp(logs.mean() + half),
            }
        )
    return pd.DataFrame(rows)


def _k_figure(k_scaling: dict[str, Any], out: Path) -> Path:
    band = _log_interval(k_scaling)
    fig, ax = subplots(figsize=(6, 4.2))
    tasks = len({c.task for c in k_scaling["cells"]})
    spread = "95% interval (log space, over tasks)" if tasks > 1 else "one task: no interval over tasks"
    ax.fill_between(band["k"], band["low"], band["high"], alpha=0.2, label=spread)
    sns.lineplot(x=band["k"], y=band["centre"], marker="o", ax=ax, label="DP-MixMin α (geometric mean over tasks)")
    anchor = band[band["k"] == k_scaling["fit_range"][0]] if k_scaling["fit_range"] else band.iloc[[0]]
    k0, a0 = float(anchor["k"].iloc[0]), float(anchor["centre"].iloc[0])
    ks = np.array(band["k"], dtype=float)
    ax.plot(ks, a0 * np.sqrt(ks / k0), "r--", label="√k reference")
    slope = k_scaling["slope"]
    title = f"ε = {k_scaling['epsilon']:g}, ρ = {k_scaling['rho']:g}"
    if slope is not None:
        low, high = k_scaling["slope_ci95"]
        title += f"; slope {slope:.2f} [{low:.2f}, {high:.2f}] for k ≥ {k_scaling['fit_range'][0]}"
    ax.set(xscale="log", yscale="log", xlabel="number of public sources k", ylabel="excess loss α (1e-3)", title=title)
    ax.set_xticks(ks, [f"{k:g}" for k in ks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.legend(fontsize=8)
    return save_figure(fig, out / "alpha_vs_k.png")


def _fits_line(fits: dict[str, Any]) -> str:
    """The log-log slope with its interval, once; the all-k fit too only where it used other points."""
    shown = [("k ≥ k_fit_min", fits["fit_range"])]
    same = {**(fits["all_k"] or {}), "k_min": None} == {**(fits["fit_range"] or {}), "k_min": None}
    if not same:
        shown.append(("all k", fits["all_k"]))
    return "; ".join(
        f"{label}: not fitted (too few points with α > 0)"
        if f is None
        else f"{label} (k ≥ {f['k_min']}): {f['slope']:.2f}, 95% interval [{f['ci95'][0]:.2f}, "
        f"{f['ci95'][1]:.2f}] over {f['points']} task × k cells"
        for label, f in shown
    )


def _method(seeds: int, comparisons: list[Comparison]) -> list[Block]:
    """How a mark is earned; with fewer than LOW_POWER_SEEDS seeds, that the tests have little
    power, and where no cell could earn a mark at all, that too: n pairs with no ties give the
    exact Wilcoxon test no p below 2 · 2⁻ⁿ, and Holm's first step multiplies it by the family's size."""
    blocks: list[Block] = [
        (
            "p",
            f"Each (ε, ρ) cell pairs every DP-MixMin run with its task's uniform mixture (tasks × seeds pairs): "
            f"the mean difference with its 95% t-interval, a two-sided paired t-test and, below {SMALL} pairs, "
            "the Wilcoxon signed-rank test; a cell's p is the larger of the two. Holm's method adjusts the p "
            f"over every (ε, ρ) cell of one level and metric; {BETTER} ({WORSE}) marks a value only where that "
            f"adjusted p is below {ALPHA:g} and DP-MixMin is closer to (farther from) λ★ than uniform.",
        )
    ]
    warnings = []
    if seeds < LOW_POWER_SEEDS:
        warnings.append(
            f"Low power: {seeds} seed{'s' if seeds != 1 else ''} per cell (fewer than {LOW_POWER_SEEDS}). "
            "A value without a mark is not evidence that DP-MixMin fails to beat uniform; run more seeds."
        )
    pairs = min(c.pairs for c in comparisons)
    family = max(
        sum(1 for d in comparisons if (d.user_level, d.metric) == (c.user_level, c.metric)) for c in comparisons
    )
    floor = min(1.0, 2 * 0.5**pairs * family)
    if pairs < 2:
        warnings.append("With one run per cell no test can run, so no value is marked.")
    elif pairs < SMALL and floor >= ALPHA:
        warnings.append(
            f"At {pairs} pairs and {family} cells, no Holm-adjusted p can fall below {floor:.2g}, so no cell "
            "of the smallest size can earn a mark."
        )
    if warnings:
        blocks.append(("strong", " ".join(warnings)))
    return blocks


def _level_blocks(result: RecoveryResult, user_level: bool, comparisons: list[Comparison]) -> list[Block]:
    """One level's pooled grid with its marks, its comparisons and Table 11's per-task rows."""
    spec = result.spec
    cells = [c for c in result.cells if c.user_level == user_level]
    part = pooled([c.to_dict() for c in cells])
    floor = pooled([c.to_dict() for c in result.noiseless if c.user_level == user_level])
    mine = [c for c in comparisons if c.user_level == user_level]
    marks = {(c.epsilon, c.rho, c.metric): c.mark for c in mine}
    counts = {c.rho: c.users if user_level else c.n for c in cells}
    unit = "users" if user_level else "examples"
    return [
        (
            "h2",
            f"{'User' if user_level else 'Example'}-level DP: cos★, L1 and α over ε × ρ "
            f"({', '.join(f'ρ = {r:g}: {n} {unit}' for r, n in sorted(counts.items()))})",
        ),
        (
            "p",
            f"Tasks: {', '.join(sorted({c.task for c in cells}))}. Uniform references: cos_u = "
            f"{part['cos_uniform'].mean():.3f}, L1_u = {part['l1_uniform'].mean():.3f}, α_u = "
            f"{part['alpha_uniform_1e3'].mean():.1f}e-3. Pooled over tasks × seeds, mean ± std.",
        ),
        ("table", _grid_table(part, spec["rhos"], floor, marks)),
        ("strong", "Paired against uniform, per cell"),
        ("table", _comparison_table(mine)),
        ("strong", "Per task (Table 11's layout: mean ± std over seeds)"),
        ("table", _task_table(cells, spec["rhos"])),
    ]


def write_recovery_report(result: RecoveryResult, out: Path) -> None:
    """recovery.json, report.md, report.html and the figures in ``out``.

    Args:
        result: the recovery run.
        out: the folder the report is written into.
    """
    spec = result.spec
    runs = f"{spec['seeds']} DP run{'s' if spec['seeds'] != 1 else ''}"
    blocks: list[Block] = [
        (
            "p",
            f"Problem {spec['problem']}; δ = {spec['delta']:g}, T = {spec['steps']}, C = {spec['clip']:g}, "
            f"q = {spec['sample_rate']:g}, η = {spec['learning_rate']:g}; {runs} per cell, σ "
            f"calibrated to each ε by the {DEFAULT_ACCOUNTANT} accountant. λ★ is MixMin on the full mixing "
            "data; DP-MixMin sees a fraction ρ of it.",
        )
    ]
    if result.tuning:
        t = result.tuning
        blocks.append(
            (
                "p",
                f"C = {t['clip']:g} and η = {t['learning_rate']:g} were chosen on public data (no "
                f"privacy spent): DP-MixMin rehearsed at ε = {t['epsilon']:g} on the world's public "
                f"validation problem ({t['task']}, n = {t['public_n']}), lowest mean α over "
                f"{len(t['candidates'])} (C, η) candidates.",
            )
        )
    comparisons = against_uniform(result.cells)
    if result.cells:
        blocks += _method(spec["seeds"], comparisons)
        for user_level in sorted({c.user_level for c in result.cells}):
            blocks += _level_blocks(result, user_level, comparisons)
        blocks.append(("figure", _heatmaps(pooled([c.to_dict() for c in result.cells]), out)))
        blocks.append(
            (
                "p",
                "The σ = 0 row is the same learner (same C, T, η) without noise: the excess loss it "
                "keeps is clipping and optimisation bias, a floor no privacy budget removes.",
            )
        )
    ks = result.k_scaling
    if ks["cells"]:
        blocks += [
            ("h2", "Excess loss against the number of sources k"),
            (
                "p",
                f"α = L(λ_DP) − L(λ★) in units of 1e-3 at ε = {ks['epsilon']:g}, ρ = {ks['rho']:g}; "
                "mean ± std over seeds per task. Log-log OLS slope (statsmodels; every task's cell is a "
                f"point): {_fits_line(ks['fits'])}. Paper: 0.49 for k ≥ 32; theory √k, slope 0.5.",
            ),
            ("table", _k_table(ks)),
            ("figure", _k_figure(ks, out)),
        ]
    write_pages(out, "dpaudit-mix weight recovery", blocks)
    write_json(out / "recovery.json", result.to_dict() | {"against_uniform": [c.to_dict() for c in comparisons]})
