"""The WarmSyn report: the seed paper's ablation beside its reported effects, and the synthetic set's quality."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd
import seaborn as sns

from ..base.atomic import write_json
from ..base.reporting import Block, save_figure, subplots, write_pages
from ..base.stats import mean_std, paired_tests, verdict
from .spec import ROWS

LABELS = {
    "cold": "Cold (DP-SGD from random init)",
    "warm": "Warm (warm-up on the small real public set)",
    "warmsyn": "WarmSyn (warm-up on EDM synthetic data)",
    "augment": "+ augmentation and Cutout",
    "sam": "+ SAM warm-up",
}
#: the seed paper's effect of each row over the one before it (CIFAR-10, ε = 2; its Tables 2–4).
PAPER = {"warm": "helped", "warmsyn": "helped", "augment": "helped (+9.8 points)", "sam": "helped (+0.6 points)"}


def frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "row": r["row"],
                "epsilon": r["epsilon"],
                "seed": r["seed"],
                "accuracy": r["metrics"]["accuracy"],
                "macro_auc": r["metrics"]["macro_auc"],
            }
            for r in records
        ]
    )


def _ablation(results: pd.DataFrame, epsilons: list[float]) -> list[list[str]]:
    rows = [["row"] + [f"ε = {eps:g}: accuracy" for eps in epsilons]]
    for row in ROWS:
        part = results[results["row"] == row]
        rows.append(
            [LABELS[row]] + [mean_std(g) for g in (part[part["epsilon"] == eps]["accuracy"] for eps in epsilons)]
        )
    return rows


def effects(results: pd.DataFrame) -> list[dict[str, Any]]:
    """Each row against the one before it: accuracy differences paired by seed, per ε."""
    wide = results.pivot_table(index=["epsilon", "seed"], columns="row", values="accuracy")
    out = []
    for before, row in pairwise(ROWS):
        tests = paired_tests({eps: d.to_numpy() for eps, d in (wide[row] - wide[before]).groupby(level="epsilon")})
        for eps, t in tests.iterrows():
            out.append(
                {"row": row, "against": before, "epsilon": eps, **t.to_dict(), "here": verdict(t), "paper": PAPER[row]}
            )
    return out


def _effect_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    table = [["addition", "ε", "accuracy change (paired, mean ± std)", "p (Holm across ε)", "here", "seed paper"]]
    for e in rows:
        table.append(
            [
                LABELS[e["row"]],
                f"{e['epsilon']:g}",
                f"{e['mean']:+.4f} ± {e['std']:.4f} ({int(e['seeds'])} seeds)",
                f"{e['p']:.3g} ({e['p_holm']:.3g})",
                e["here"],
                e["paper"],
            ]
        )
    return table


def _figure(results: pd.DataFrame, out: Path) -> Path:
    sns.set_theme(style="whitegrid")
    fig, ax = subplots(figsize=(7, 4))
    sns.barplot(results, x="epsilon", y="accuracy", hue="row", hue_order=list(ROWS), errorbar="sd", ax=ax)
    ax.set(xlabel="ε", ylabel="test accuracy", title="WarmSyn ablation: mean ± std over seeds")
    ax.set_ylim(max(0.0, results["accuracy"].min() - 0.05), 1.0)
    return save_figure(fig, out / "ablation.png")


def write_warmsyn_report(result: dict[str, Any], out: Path) -> pd.DataFrame:
    """warmsyn.json, report.md, report.html and ablation.png in ``out``; returns the results frame."""
    spec, q = result["spec"], result["quality"]
    results = frame(result["records"])
    result["effects"] = effects(results)
    syn = pd.DataFrame(q["synthetic"])
    blocks: list[Block] = [
        (
            "p",
            f"World {spec['world']}: a public in-distribution slice of {spec['public_size']} images "
            f"({spec['public_size'] / result['sensitive_train']:.0%} of the {result['sensitive_train']} sensitive "
            f"training images) trains a class-conditional EDM (MLP denoiser at 14×14, {spec['edm_steps']} "
            f"steps), which samples {spec['synthetic_size']} images. Warm-ups: {spec['warmup_steps']} SGD steps "
            f"of 64. Then the pipeline's Opacus DP finetune ({spec['finetune_epochs']} epochs, expected batch "
            f"{spec['finetune_batch']}, C = {spec['finetune_clip']:g}) on the sensitive training images; "
            f"δ = {spec['delta']:g}; {spec['seeds']} seeds.",
        ),
        ("table", _ablation(results, spec["epsilons"])),
        ("h2", "What each addition did, here and in the seed paper"),
        (
            "p",
            "Paired over seeds against the row before; two-sided t-test (statsmodels), Holm-corrected across ε. "
            "The seed paper's effects are on CIFAR-10; only their direction is comparable.",
        ),
        ("table", _effect_table(result["effects"])),
        ("h2", "The synthetic set"),
        (
            "p",
            f"CAS (a logistic regression trained on the data, tested on the real sensitive test set): synthetic "
            f"{mean_std(syn['cas'], separator=' ± ')} against "
            f"{q['real_slice_cas']:.3f} for the real slice itself. Memorisation: median nearest-neighbour distance "
            f"of synthetic images to the training slice {syn['synthetic_to_train_median'].mean():.2f} against "
            f"{syn['real_to_train_median'].mean():.2f} for held-out real images (ratio "
            f"{syn['ratio'].mean():.2f}); {syn['synthetic_closer_than_any_real_share'].mean():.1%} of synthetic "
            "images sit closer to a training image than any held-out real image does.",
        ),
        ("figure", _figure(results, out)),
    ]
    write_pages(out, "dpaudit-mix WarmSyn", blocks)
    write_json(out / "warmsyn.json", result)
    return results
