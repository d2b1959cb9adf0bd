"""The card a model release writes beside release.json: the composed claim, the one-run audit
of the finetune that made the weights, and the model's test metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..reporting import Block, save_figure, subplots, write_pages
from .audit_size import power_sentence
from .card import lambda_bars, provenance

#: AUC at or below this is a task the model does no better than chance on (the card says so).
CHANCE_AUC = 0.5


def _phase(phase: dict[str, Any] | None) -> str:
    if phase is None:
        return "none (a free method)"
    return f"σ = {phase['noise_multiplier']:.5g}, q = {phase['sample_rate']:.4g}, T = {phase['steps']}"


def _methods(audit: dict[str, Any]) -> str:
    """Which bounds the audit took the larger of (a release made before the f-DP bound has one)."""
    bounds = audit.get("bounds")
    if not bounds:
        return "Steinke, Nasr & Jagielski 2023"
    each = ", ".join(f"{name} {value:.3f}" for name, value in bounds.items())
    return f"the larger of Steinke, Nasr & Jagielski 2023 and the f-DP bound of Mahloujifar et al. 2025: {each}"


def _cost(audit: dict[str, Any]) -> str:
    """The audit's wall time beside the finetune's: the card says what the canaries cost, measured."""
    seconds = audit["seconds"]
    ratio = seconds["audit"] / max(seconds["finetune"], 1e-9)
    return f" The audit took {seconds['audit']:.1f} s, {ratio:.1f}× the finetune's {seconds['finetune']:.1f} s."


def write_model_card(manifest: dict[str, Any], out: Path, fingerprint: str) -> None:
    """release.md / release.html of a model release."""
    claim, audit, budget, model = manifest["claim"], manifest["audit"], manifest["budget"], manifest["model"]
    cap = "no cap" if budget["budget_epsilon"] is None else f"{budget['budget_epsilon']:g}"
    verdict = "VIOLATION" if audit["violation"] else "no violation"
    profile = audit["epsilon_lower_bound_profile"]
    metrics = [["metric", "value"]] + [[k, f"{v:.4f}"] for k, v in manifest["metrics"].items()]
    weights = manifest["mixture"]["weights"]
    mixture = (
        "no pretraining mixture"
        if weights is None
        else "λ = " + ", ".join(f"{n} {w:.3f}" for n, w in zip(manifest["mixture"]["sources"], weights, strict=True))
    )
    blocks: list[Block] = [
        (
            "strong",
            f"Released: a {model['architecture']} ({model['task']}, {model['parameters']} weights) that is "
            f"({claim['epsilon']:.4g}, {claim['delta']:g})-DP for each example of the sensitive data "
            f"({claim['composition']} composition of its mixture and its finetune).",
        ),
        (
            "p",
            f"Mixture ({claim['method']}): {_phase(claim['mixture_phase'])}, ε {claim['mixture_epsilon']:.4g} (PLD); "
            f"{mixture}. Finetune: {_phase(claim['finetune_phase'])}, C = {claim['clip']:g}, batch "
            f"{claim['batch']}, {claim['epochs']} epochs, ε {claim['finetune_epsilon']:.4g} "
            f"({claim['finetune_accountant']}). Noise, batches and canaries from the OS CSPRNG.",
        ),
        (
            "p",
            f"Spent ε = {budget['spent_epsilon']:.4g} of {cap} on this data set after this release (both phases "
            "of this model charged to the split each ran on, with every other release on the data, λ and models, "
            f"composed by PLD at δ = {budget['delta']:g}: parallel across disjoint splits, sequential on the same "
            "examples).",
        ),
        (
            "p",
            f"verify-accountant ({manifest['verification']['level']}): "
            f"{'PASS' if manifest['verification']['passed'] else 'FAIL'} "
            f"({', '.join(manifest['verification'].get('checks', []))}). One-run audit of this very finetune "
            f"({_methods(audit)}; {audit['canaries']} Dirac canaries, {audit['members']} in, "
            f"{audit['confidence']:.0%}): {verdict}; ε_LB {audit['epsilon_lower_bound']:.3f}"
            + ("" if profile is None else f", ε_LB (profile) {profile:.3f}")
            + f" against the finetune's claimed ε {audit['claimed_epsilon']:.4g}. "
            + power_sentence(audit, f"{audit['canaries']} canaries", "finetune")
            + _cost(audit),
        ),
        ("table", metrics),
        *_chance_warnings(manifest["metrics"]),
        ("p", f"Weights: {model['file']}, sha256 {model['sha256'][:16]}…; released {manifest['timestamp']}."),
        ("p", provenance(manifest, fingerprint)),
        ("figure", _figure(manifest, out)),
    ]
    write_pages(out, "dpaudit-mix model release", blocks, name="release")


def _chance_warnings(metrics: dict[str, float]) -> list[Block]:
    """One warning line per AUC at or below chance: a model no better than a coin on that task."""
    return [
        (
            "strong",
            f"Warning: {name} = {value:.3f} is at or below chance ({CHANCE_AUC:g}): the model does not "
            "separate this task's classes; do not rely on it there.",
        )
        for name, value in metrics.items()
        if "auc" in name and value <= CHANCE_AUC
    ]


def _figure(manifest: dict[str, Any], out: Path) -> Path:
    """card.png: the pretraining mixture λ as bars (where there is one) and the model's metrics."""
    weights, sources = manifest["mixture"]["weights"], manifest["mixture"]["sources"]
    metrics = manifest["metrics"]
    fig, (left, right) = subplots(1, 2, figsize=(11, 0.32 * max(len(sources), len(metrics)) + 1.6))
    if weights is None:
        left.text(0.5, 0.5, "no pretraining mixture", ha="center", va="center")
        left.set_axis_off()
    else:
        lambda_bars(left, np.array(weights), list(sources))
    y = np.arange(len(metrics))
    right.barh(y, list(metrics.values()), color="tab:green")
    right.set(yticks=y, yticklabels=list(metrics), xlabel="value", title="the released model's metrics")
    right.invert_yaxis()
    return save_figure(fig, out / "card.png")
