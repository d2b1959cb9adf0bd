"""The card a model release writes beside release.json: the composed claim, the one-run audit
of the finetune that made the weights, and the model's test metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..base.reporting import Block, save_figure, subplots, write_pages
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
    metrics = _metrics_table(manifest["metrics"], manifest.get("baselines", {}))
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
            f"Spent ε = {budget['spent_epsilon']:.4g} of {cap} (example-level) on this data set after this "
            "release (both phases of this model charged to the split each ran on, with every other release on the "
            f"data, λ and models, composed by PLD at δ = {budget['delta']:g}: parallel across disjoint splits, "
            "sequential on the same examples).",
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
        *_warnings(manifest["metrics"], manifest.get("baselines", {})),
        ("p", f"Weights: {model['file']}, sha256 {model['sha256'][:16]}…; released {manifest['timestamp']}."),
        ("p", provenance(manifest, fingerprint)),
        ("figure", _figure(manifest, out)),
    ]
    write_pages(out, "dpaudit-mix model release", blocks, name="release")


#: how the card names each baseline of :func:`..pipeline.release._baselines`.
BASELINE_NAMES = {"pretrained_only": "pretrained on λ, no finetune", "chance": "chance"}


def _metrics_table(metrics: dict[str, float], baselines: dict[str, dict[str, float]]) -> list[list[str]]:
    """The released model's metrics, a column each for the baselines beside them (a release made
    before the card had baselines has none)."""
    head = ["metric", "released model", *(BASELINE_NAMES[name] for name in baselines)]
    return [head] + [[k, f"{v:.4f}", *(f"{b[k]:.4f}" for b in baselines.values())] for k, v in metrics.items()]


def _is_auc(metric: str) -> bool:
    """An AUC of :func:`..models.cnn.evaluate` or :func:`..models.cnn.task_auc`: the headline's, or
    one digit's one-vs-rest (named ``digit-d``)."""
    return metric in ("auc", "macro_auc") or metric.startswith("digit-")


def _warnings(metrics: dict[str, float], baselines: dict[str, dict[str, float]]) -> list[Block]:
    """One warning line per AUC at or below chance (a model no better than a coin on that task),
    and one where the DP finetune left the headline AUC below the pretrained model it started from."""
    found: list[Block] = [
        (
            "strong",
            f"Warning: {name} = {value:.3f} is at or below chance ({CHANCE_AUC:g}): the model does not "
            "separate this task's classes; do not rely on it there.",
        )
        for name, value in metrics.items()
        if _is_auc(name) and value <= CHANCE_AUC
    ]
    headline = "macro_auc" if "macro_auc" in metrics else "auc"
    before = baselines.get("pretrained_only", {}).get(headline)
    if before is not None and metrics[headline] < before:
        found.append(
            (
                "strong",
                f"Warning: the DP finetune lowered {headline} from the pretrained model's {before:.3f} to "
                f"{metrics[headline]:.3f}: at this ε its noise cost more than the sensitive data taught.",
            )
        )
    return found


def _figure(manifest: dict[str, Any], out: Path) -> Path:
    """card.png: the pretraining mixture λ as bars (where there is one) and the model's metrics,
    each beside the λ-pretrained model's (where there is one) and chance's."""
    weights, sources = manifest["mixture"]["weights"], manifest["mixture"]["sources"]
    metrics = manifest["metrics"]
    fig, (left, right) = subplots(1, 2, figsize=(11, 0.32 * max(len(sources), len(metrics)) + 1.6))
    if weights is None:
        left.text(0.5, 0.5, "no pretraining mixture", ha="center", va="center")
        left.set_axis_off()
    else:
        lambda_bars(left, np.array(weights), list(sources))
    y = np.arange(len(metrics))
    baselines = manifest.get("baselines", {})
    pretrained = baselines.get("pretrained_only")
    height = 0.8 if pretrained is None else 0.4
    middle = y if pretrained is None else y + height / 2
    right.barh(y, list(metrics.values()), height=height, color="tab:green", label="released model")
    if pretrained is not None:
        values = [pretrained[k] for k in metrics]
        right.barh(y + height, values, height=height, color="tab:gray", label=BASELINE_NAMES["pretrained_only"])
    if "chance" in baselines:
        chance = [baselines["chance"][k] for k in metrics]
        right.scatter(chance, middle, marker="|", s=300, color="black", label=BASELINE_NAMES["chance"])
    right.set(yticks=middle, yticklabels=list(metrics), xlabel="value")
    right.legend(  # above the bars, where no bar is hidden by it
        title="the released model's metrics beside its baselines",
        fontsize="small",
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=3,
        frameon=False,
    )
    right.invert_yaxis()
    return save_figure(fig, out / "card.png")
