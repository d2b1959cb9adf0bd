"""Rows of a pipeline spec side by side (docs/concepts/pipeline.md): its list keys (``rhos``, ``proxies``,
``proxy_epochs_grid``, ``protocols``) run the pipeline once per value, as the paper's tables do.

Two endpoints are fixed in advance for every row whose methods allow them, each a paired
difference over seeds of the headline metric (macro AUC, or test perplexity on the text track),
tested per ε and Holm-corrected across the rows:
- ``lambda_star_minus_uniform``: λ★ (non-private MixMin) against uniform: is the objective right?
- ``dpmixmin_minus_lambda_star``: DP-MixMin against λ★: what privacy costs.
Beside them: each row's mean proxy validation accuracy and cos(λ_DP, λ★) over seeds (per task
first averaged over the tasks), and, when proxy epochs vary, the paper's Tables 3 and 5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..base.atomic import atomic_path, write_json
from ..base.reporting import Block, save_figure, subplots, write_pages
from ..base.stats import ALPHA, mean_std, paired_tests
from ..recovery.metrics import cos_similarity
from .spec import MAP_KEYS, SpecRow

#: endpoint → (method, minus method).
ENDPOINTS = {
    "lambda_star_minus_uniform": ("nonprivate_mixmin", "uniform"),
    "dpmixmin_minus_uniform": ("dpmixmin", "uniform"),
    "dpmixmin_minus_lambda_star": ("dpmixmin", "nonprivate_mixmin"),
}
#: the proxy epochs the budget table compares every other budget's λ_DP to (the paper's main E = 4).
REFERENCE_EPOCHS = 4
#: the paper's Table 3 (NIH Atelectasis AUC, CheXpert pretraining, ε = 1, mean ± std over 3 seeds)
#: and Table 5 (cos of the ε = 1 DP-MixMin mixture at E epochs to E = 4, mean over its six listed
#: NIH classes and their range), quoted for comparison.
PAPER_TABLE_3 = {1: "0.744 ± 0.005", 2: "0.745 ± 0.005", 4: "0.742 ± 0.006", 6: "0.749 ± 0.003"}
PAPER_TABLE_5 = {1: "0.928 (0.868–0.986)", 2: "0.955 (0.873–0.988)", 4: "1", 6: "0.933 (0.848–0.975)"}


@dataclass(frozen=True)
class RowResult:
    """One row's run: its records (one per run, as ``Run.to_dict``), its headline score per
    (method, ε, seed) (macro over tasks) and its proxies' mean public validation accuracy."""

    variant: SpecRow[Any]
    records: list[dict[str, Any]]
    scores: pd.DataFrame  # columns method, epsilon, seed, value
    proxy_accuracy: float | None


def mixture_entries(records: Sequence[dict[str, Any]], **extra: Any) -> list[dict[str, Any]]:
    """``mixtures.json``: one entry per λ a run used (methods without a λ have none)."""
    return [
        {
            **extra,
            "method": r["method"],
            "task": r.get("task", "multiclass"),
            "epsilon": r["epsilon"],
            "seed": r["seed"],
            "weights": r["mixture"]["weights"],
            **({"learner": r["mixture"]["learner"]} if "learner" in r["mixture"] else {}),
        }
        for r in records
        if r["mixture"]["weights"] is not None
    ]


def write_mixtures(out: Path, entries: list[dict[str, Any]]) -> None:
    write_json(out / "mixtures.json", entries)


def _weights(records: list[dict[str, Any]], method: str) -> dict[tuple[float, int, str], np.ndarray]:
    return {
        (r["epsilon"], r["seed"], r.get("task", "multiclass")): np.asarray(r["mixture"]["weights"])
        for r in records
        if r["method"] == method and r["mixture"]["weights"] is not None
    }


def _cosines(
    left: dict[tuple[float, int, str], np.ndarray], right: dict[tuple[float, int, str], np.ndarray], any_epsilon: bool
) -> dict[float, list[float]]:
    """Per ε, per seed: cos(left λ, right λ) averaged over tasks. ``any_epsilon``: the right λ is
    the same at every ε (λ★), so it is looked up by seed and task alone."""
    per_seed: dict[tuple[float, int], list[float]] = {}
    for (eps, seed, task), weights in left.items():
        other = next(
            (w for (e, s, t), w in right.items() if s == seed and t == task and (any_epsilon or e == eps)), None
        )
        if other is not None:
            per_seed.setdefault((eps, seed), []).append(float(cos_similarity(weights, other)))
    out: dict[float, list[float]] = {}
    for (eps, _), values in sorted(per_seed.items()):
        out.setdefault(eps, []).append(float(np.mean(values)))
    return out


def endpoint_tests(results: Sequence[RowResult]) -> dict[str, dict[float, pd.DataFrame]]:
    """Per endpoint and ε: paired differences over seeds per row, Holm-corrected across rows."""
    tests: dict[str, dict[float, pd.DataFrame]] = {}
    for name, (method, other) in ENDPOINTS.items():
        by_eps: dict[float, dict[str, np.ndarray]] = {}
        for result in results:
            table = result.scores.pivot_table(index=["epsilon", "seed"], columns="method", values="value")
            if method not in table or other not in table:
                continue
            for eps, diff in (table[method] - table[other]).groupby(level="epsilon"):
                by_eps.setdefault(float(eps), {})[result.variant.label] = diff.to_numpy()
        if by_eps:
            tests[name] = {eps: paired_tests(rows) for eps, rows in by_eps.items()}  # type: ignore[arg-type]
    return tests


def _scores_table(results: Sequence[RowResult], metric: str) -> list[list[str]]:
    epsilons = sorted({float(e) for r in results for e in r.scores["epsilon"]})
    rows = [["row", "method", *(f"{metric}, ε = {e:g}" for e in epsilons)]]
    for result in results:
        for method, group in result.scores.groupby("method", sort=False):
            cells = [group[group["epsilon"] == e]["value"] for e in epsilons]
            rows.append([result.variant.label, str(method), *(mean_std(c, 4) if len(c) else "—" for c in cells)])
    return rows


def _endpoint_table(tests: dict[str, dict[float, pd.DataFrame]]) -> list[list[str]]:
    rows = [["endpoint", "ε", "row", "mean ± std", "seeds", "p", "p (Holm, across rows)"]]
    for name, by_eps in tests.items():
        for eps, table in by_eps.items():
            for label, row in table.iterrows():
                rows.append(
                    [
                        name,
                        f"{eps:g}",
                        str(label),
                        f"{row['mean']:+.4f} ± {row['std']:.4f}",
                        str(int(row["seeds"])),
                        f"{row['p']:.3g}",
                        f"{row['p_holm']:.3g}" + (" *" if row["p_holm"] < ALPHA else ""),
                    ]
                )
    return rows


def _diagnostics_table(results: Sequence[RowResult]) -> list[list[str]]:
    rows = [["row", "proxy validation accuracy (mean over sources)", "ε", "cos(λ_DP, λ★), mean ± std over seeds"]]
    for result in results:
        accuracy = "—" if result.proxy_accuracy is None else f"{result.proxy_accuracy:.3f}"
        cosines = _cosines(
            _weights(result.records, "dpmixmin"), _weights(result.records, "nonprivate_mixmin"), any_epsilon=True
        )
        for eps, values in cosines.items() or [(None, [])]:
            rows.append(
                [
                    result.variant.label,
                    accuracy,
                    "—" if eps is None else f"{eps:g}",
                    mean_std(values, 3) if values else "—",
                ]
            )
    return rows


def _budget_table(results: Sequence[RowResult], metric: str) -> list[list[str]] | None:
    """DP-MixMin per proxy-epoch budget: its score, cos(λ_DP(E), λ_DP(4)) over seeds and (with
    λ★ among the methods) cos(λ★(E), λ★(4)), the proxies' change without the noise; the paper's
    Tables 3 and 5 beside. None unless the rows vary proxy_epochs."""
    by_epochs = {
        dict(r.variant.settings).get("proxy_epochs"): r for r in results if "proxy_epochs" in dict(r.variant.settings)
    }
    if len(by_epochs) < 2:
        return None
    reference = by_epochs.get(REFERENCE_EPOCHS)
    rows = [
        [
            "proxy epochs",
            "ε",
            f"DP-MixMin {metric}",
            f"cos(λ_DP(E), λ_DP({REFERENCE_EPOCHS}))",
            f"cos(λ★(E), λ★({REFERENCE_EPOCHS}))",
            "paper Table 3 AUC",
            "paper Table 5 cos",
        ]
    ]

    def cosines(result: RowResult, method: str) -> dict[float, list[float]]:
        if reference is None:
            return {}
        same = method == "nonprivate_mixmin"  # λ★ is the same at every ε
        return _cosines(_weights(result.records, method), _weights(reference.records, method), any_epsilon=same)

    for epochs, result in sorted(by_epochs.items()):
        dp = result.scores[result.scores["method"] == "dpmixmin"]
        private, star = cosines(result, "dpmixmin"), cosines(result, "nonprivate_mixmin")
        for eps, group in dp.groupby("epsilon"):
            values, stars = private.get(float(eps), []), next(iter(star.values()), [])
            rows.append(
                [
                    str(epochs),
                    f"{eps:g}",
                    mean_std(group["value"], 4),
                    mean_std(values, 3) if values else "—",
                    mean_std(stars, 3) if stars else "—",
                    PAPER_TABLE_3.get(epochs, "—"),  # type: ignore[arg-type]
                    PAPER_TABLE_5.get(epochs, "—"),  # type: ignore[arg-type]
                ]
            )
    return rows


def _map_figure(results: Sequence[RowResult], tests: dict[str, dict[float, pd.DataFrame]], out: Path) -> Path | None:
    """A heat map of DP-MixMin − uniform per cell of the map (bad sources across, pretraining
    examples down, one panel per finetune rows and ε), each cell its mean over seeds and a star
    where the Holm-corrected p is below α. None unless the rows vary a map key."""
    varied = [k for k in MAP_KEYS if len({dict(r.variant.settings).get(k) for r in results}) > 1]
    gains = tests.get("dpmixmin_minus_uniform")
    if not varied or not gains:
        return None
    cells = []
    for result in results:
        settings = dict(result.variant.settings)
        for eps, table in gains.items():
            if result.variant.label in table.index:
                row = table.loc[result.variant.label]
                cells.append({**{k: settings.get(k, "—") for k in MAP_KEYS}, "epsilon": eps, **row.to_dict()})
    frame = pd.DataFrame(cells)
    panels = list(frame.groupby(["finetune_rows", "epsilon"], sort=True))
    fig, axes = subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, ((rows, eps), panel) in zip(axes[0], panels, strict=True):
        # dropna=False: with one seed every p is NaN (no test), and its cells must still line up
        means, holm = (
            panel.pivot_table(index="pretrain_examples", columns="permuted_sources", values=v, dropna=False)
            for v in ("mean", "p_holm")
        )
        limit = float(np.nanmax(np.abs(frame["mean"]))) or 1.0
        image = ax.imshow(means.to_numpy(), cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
        ax.grid(False)
        for (i, j), value in np.ndenumerate(means.to_numpy()):
            star = "*" if holm.to_numpy()[i, j] < ALPHA else ""
            ink = "white" if abs(value) > 0.6 * limit else "black"
            ax.text(j, i, f"{value:+.3f}{star}", ha="center", va="center", fontsize=9, color=ink)
        ax.set_xticks(range(len(means.columns)), [str(c) for c in means.columns])
        ax.set_yticks(range(len(means.index)), [str(i) for i in means.index])
        ax.set_xlabel("label-permuted sources added")
        ax.set_ylabel("pretraining examples")
        ax.set_title(f"finetune rows {rows}, ε = {eps:g}")
        fig.colorbar(image, ax=ax, label="DP-MixMin − uniform")
    return save_figure(fig, out / "map.png")


def write_rows_report(results: Sequence[RowResult], metric: str, out: Path, title: str) -> dict[str, Any]:
    """rows.csv, report.md/html and mixtures.json (every row's λ, with its row) in ``out``;
    returns the endpoints' mean differences per row and ε (what stdout shows)."""
    frame = pd.concat(
        [r.scores.assign(row=r.variant.label, **dict(r.variant.settings)) for r in results], ignore_index=True
    )
    with atomic_path(out / "rows.csv", suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)
    write_mixtures(out, [e for r in results for e in mixture_entries(r.records, row=r.variant.label)])
    tests = endpoint_tests(results)
    blocks: list[Block] = [
        ("p", f"{len(results)} rows, each a whole pipeline run (its own report under rows/). Headline: {metric}."),
        ("table", _scores_table(results, metric)),
        ("h2", "Endpoints (fixed in advance), paired over seeds, Holm-corrected across rows per ε"),
        (
            "p",
            "lambda_star_minus_uniform = λ★ (non-private MixMin, not releasable) − uniform; "
            "dpmixmin_minus_uniform = DP-MixMin − uniform (what a user gains); "
            f"dpmixmin_minus_lambda_star = DP-MixMin − λ★; differences of {metric}. Two-sided paired t-tests "
            f"(statsmodels); * marks Holm p < {ALPHA:g}.",
        ),
        ("table", _endpoint_table(tests) if tests else [["no endpoint: the methods lack uniform or λ★"]]),
        ("h2", "Per row: proxies and how close private λ is to λ★"),
        ("table", _diagnostics_table(results)),
    ]
    budget = _budget_table(results, metric)
    if budget is not None:
        blocks += [("h2", "Proxy training budget (paper Tables 3 and 5)"), ("table", budget)]
    figure = _map_figure(results, tests, out)
    if figure is not None:
        blocks += [("h2", "The map: DP-MixMin − uniform (* Holm p < 0.05)"), ("figure", figure)]
    write_pages(out, title, blocks)
    means: dict[str, dict[str, dict[float, float]]] = {}
    for name, by_eps in tests.items():
        for eps, table in by_eps.items():
            for label, row in table.iterrows():
                means.setdefault(name, {}).setdefault(str(label), {})[eps] = float(row["mean"])
    return means
