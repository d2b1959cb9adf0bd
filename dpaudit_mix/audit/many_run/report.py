"""Audit reports: audit.json, report.md and a self-contained report.html with seaborn figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from ...base import owned
from ...base.atomic import write_json, write_npz
from ...base.reporting import Block, save_figure, subplots, write_pages
from ..attack import AttackResult
from ..profile import TradeOff
from .engine import AuditOutcome, score_label
from .result import AuditSummary
from .words import power_line


def _label(canary: str, threat: str, noise: bool) -> str:
    return f"{canary} / {threat} / {'private' if noise else 'no-noise control'}"


def _log_roc(ax: Any, fpr: np.ndarray, tpr: np.ndarray, positives: int, negatives: int) -> None:
    """The ROC on log–log axes, where the low-FPR tail that bounds ε is visible, with each TPR's
    95 % Clopper–Pearson band (statsmodels); zero rates are drawn at half a count."""
    from statsmodels.stats.proportion import proportion_confint

    fpr, tpr = fpr[::-1], tpr[::-1]  # rising FPR, for the steps
    low, high = proportion_confint(np.rint(tpr * positives), positives, alpha=0.05, method="beta")
    x = np.maximum(fpr, 0.5 / negatives)
    floor = 0.5 / positives
    ax.fill_between(x, np.maximum(low, floor), np.maximum(high, floor), alpha=0.25, step="post", label="95% CP band")
    ax.plot(x, np.maximum(tpr, floor), lw=1.2, drawstyle="steps-post", label="ROC")
    diagonal = np.geomspace(0.5 / negatives, 1, 50)
    ax.plot(diagonal, diagonal, color="grey", lw=0.8, ls=":", label="chance")
    ax.set(xscale="log", yscale="log", xlabel="FPR (log)", ylabel="TPR (log)")


def _figures(outcome: AuditOutcome, out: Path) -> list[Path]:
    """Score histograms (in vs out) and ROC curves with the chosen threshold, each over the runs its
    attack counted (all of them, or EVAL for the split strategy), and ε_LB vs claim."""
    sns.set_theme(style="whitegrid")
    keys = sorted(outcome.attacks, key=lambda k: (k[0], k[1], not k[2]))  # each private run beside its σ = 0 control
    cols = 2
    rows = -(-len(keys) // cols)
    hist, hist_axes = subplots(rows, cols, figsize=(11, 3 * rows), squeeze=False)
    roc, roc_axes = subplots(rows, cols, figsize=(9, 3.6 * rows), squeeze=False)
    for i, key in enumerate(keys):
        attacked = outcome.attacks[key]
        attack = attacked.attack
        scores = np.concatenate([attacked.scores_in, attacked.scores_out])
        include = np.arange(len(scores)) < len(attacked.scores_in)
        evaluate = attack.evaluated
        frame = pd.DataFrame({"score": scores[evaluate], "canary": np.where(include[evaluate], "in", "out")})
        ax = hist_axes.flat[i]
        sns.histplot(frame, x="score", hue="canary", bins=40, element="step", stat="density", ax=ax)
        ax.axvline(attack.gdp.threshold, color="black", ls="--", lw=1)
        ax.set_title(_label(*key), fontsize=9)
        s_in, s_out = np.sort(scores[evaluate & include]), np.sort(scores[evaluate & ~include])
        grid = np.unique(np.concatenate([s_in, s_out, [np.inf]]))
        tpr = 1 - np.searchsorted(s_in, grid, side="left") / len(s_in)
        fpr = 1 - np.searchsorted(s_out, grid, side="left") / len(s_out)
        ax = roc_axes.flat[i]
        _log_roc(ax, fpr, tpr, len(s_in), len(s_out))
        point = attack.gdp
        floor = 0.5 / len(s_out)
        ax.scatter(
            [max(point.fp / point.negatives, floor)],
            [max(1 - point.fn / point.positives, 0.5 / len(s_in))],
            color="red",
            zorder=3,
            label="μ_LB threshold",
        )
        ax.set(title=_label(*key))
        ax.title.set_fontsize(9)
        ax.legend(loc="lower right", fontsize=8)
    for ax in list(hist_axes.flat[len(keys) :]) + list(roc_axes.flat[len(keys) :]):
        ax.set_visible(False)
    summary = outcome.summary
    frame = pd.DataFrame(
        [
            {"setting": _label(r.canary, r.threat, r.noise), "bound": name, "ε": value}
            for r in summary.results
            for name, value in (("strict ε_LB", r.epsilon_lower_bound), ("GDP ε_LB", r.epsilon_lower_bound_gdp))
        ]
    )
    bar, ax = subplots(figsize=(8, 0.6 * len(summary.results) + 1.2))
    sns.barplot(frame, y="setting", x="ε", hue="bound", ax=ax)
    ax.axvline(summary.claimed_epsilon, color="red", ls="--", label=f"claimed ε = {summary.claimed_epsilon:g}")
    ax.legend()
    paths = [out / "tradeoff.png", out / "scores.png", out / "roc.png", out / "epsilon.png"]
    private = {_label(*key): a.attack for key, a in outcome.attacks.items() if key[2]}
    tradeoff = tradeoff_figure(outcome.claimed, outcome.summary.claimed_epsilon, private)
    for fig, path in zip((tradeoff, hist, roc, bar), paths, strict=True):
        save_figure(fig, path)
    return paths


def tradeoff_figure(claimed: TradeOff, epsilon: float, attacks: dict[str, AttackResult]) -> Figure:
    """The FPR–FNR plane: the claimed trade-off curve and each attack's CP points.

    A point below the curve is a rigorous violation; the closer the points come to the curve
    from above, the tighter the audit.
    """
    fig, ax = subplots(figsize=(6.4, 5.6))
    alpha = np.concatenate([np.geomspace(1e-6, 1e-2, 200), np.linspace(1e-2, 1, 400)])
    ax.plot(alpha, claimed.fnr_floor(alpha), color="red", lw=2, label=f"claimed trade-off f (ε = {epsilon:g})")
    markers = iter("osD^vP")
    for label, attack in attacks.items():
        pts = np.array([[p.fpr_upper, p.fnr_upper] for p in attack.points])
        marker = next(markers, "o")
        ax.scatter(pts[:, 0], pts[:, 1], s=14, marker=marker, alpha=0.6, label=f"{label}: CP points")
        ax.scatter(
            [attack.gdp.fpr_upper],
            [attack.gdp.fnr_upper],
            s=70,
            marker=marker,
            edgecolor="black",
            label=f"μ_LB = {attack.mu_lower_bound:.3f}",
        )
    ax.plot([0, 1], [1, 0], color="grey", lw=0.8, ls=":", label="random guessing")
    ax.set(
        xlim=(0, 1),
        ylim=(0, 1),
        xlabel="FPR (upper confidence bound)",
        ylabel="FNR (upper confidence bound)",
        title="Empirical CP points against the claimed trade-off curve",
    )
    ax.title.set_fontsize(10)
    ax.legend(fontsize=7, loc="upper right")
    return fig


def _table(summary: AuditSummary) -> list[list[str]]:
    rows = [
        [
            "canary",
            "threat",
            "noise",
            "runs",
            "ε_LB",
            "μ_LB",
            "ε_LB (GDP)",
            "ε_LB (profile)",
            "profile",
            "AUROC [95% CI]",
            "TPR@1e-3",
            "TPR@1e-2",
        ]
    ]
    for r in summary.results:
        low, high = r.auroc_ci
        rows.append(
            [
                r.canary,
                r.threat,
                "private" if r.noise else "σ=0 control",
                str(r.runs),
                f"{r.epsilon_lower_bound:.3f}",
                f"{r.mu_lower_bound:.3f}",
                f"{r.epsilon_lower_bound_gdp:.3f}",
                f"{r.epsilon_lower_bound_profile:.3f}",
                "VIOLATED" if r.profile_violation else "ok",
                f"{r.auroc:.3f} [{low:.3f}, {high:.3f}]",
                f"{r.tpr_at_fpr['0.001']:.4f}",
                f"{r.tpr_at_fpr['0.01']:.4f}",
            ]
        )
    return rows


def summary_verdict(summary: AuditSummary) -> str:
    """The audit's verdict in one line, naming the test that fired (see :func:`.words.verdict_line`)."""
    eps = summary.claimed_epsilon
    private = [r for r in summary.results if r.noise]
    if any(r.epsilon_violation for r in private):
        worst = max(private, key=lambda r: r.epsilon_lower_bound)
        return (
            f"VIOLATION (ε violated): {worst.name}'s strict lower bound ε_LB = {worst.epsilon_lower_bound:.3f} "
            "exceeds the "
            f"claimed ε = {eps:g}; the mechanism or its accounting is broken"
        )
    if summary.violation:
        worst = max(private, key=lambda r: r.epsilon_lower_bound_profile)
        return (
            f"VIOLATION (curve violated): a CP point of {worst.name} lies below the claimed trade-off curve "
            f"({summary.claimed_tradeoff['kind']}): the mechanism is not the claimed one (its σ-scaled family's "
            f"ε_LB is {worst.epsilon_lower_bound_profile:.3f}; no strict ε_LB exceeds ε = {eps:g})"
        )
    return ""


def _verdict(summary: AuditSummary) -> str:
    eps = summary.claimed_epsilon
    if summary.violation:
        return summary_verdict(summary) + "."
    if summary.inconclusive:
        return (
            f"INCONCLUSIVE: the σ = 0 control(s) {', '.join(summary.blind_controls)} stay within the claimed "
            f"ε = {eps:g}, so this audit cannot see leakage there (too few runs, or a canary the attack cannot "
            "detect); its private results prove nothing."
        )
    return (
        f"No violation: every private result's CP point lies on or above the claimed trade-off curve, and every "
        f"strict ε_LB is at most the claimed ε = {eps:g}."
    )


def write_report(outcome: AuditOutcome, out: Path) -> None:
    """audit.json, report.md, report.html and PNG figures in ``out`` (each written atomically)."""
    summary = outcome.summary
    data = ", ".join(f"{key} = {value}" for key, value in summary.problem.items() if key not in ("name", "task"))
    head = (
        f"Mechanism {summary.mechanism} on problem {summary.problem['name']} / {summary.problem['task']} ({data}); "
        f"claimed (ε, δ) = ({summary.claimed_epsilon:g}, {summary.delta:g}); σ = "
        f"{summary.noise_multiplier:.4g} (calibrated {summary.calibrated_noise_multiplier:.4g}); "
        f"Clopper–Pearson at {summary.confidence_per_result:.4g} per result, so that the verdict over every "
        f"private result holds at {summary.confidence:.0%}; thresholds chosen by '{summary.threshold_strategy}'. "
        f"ε_LB is the strict (ε, δ) bound; μ_LB and ε_LB (GDP) assume a Gaussian trade-off curve: "
        + (
            "a bound here (full batch)"
            if summary.results and summary.results[0].gdp_is_bound
            else "NOT a bound here (Poisson sampling: the subsampled Gaussian is not a Gaussian trade-off)"
        )
        + f"; 'profile' compares the CP points with the claimed trade-off curve "
        f"({summary.claimed_tradeoff['kind']}), a rigorous test of the claimed mechanism (a violation says it is "
        "not that mechanism, not that ε is exceeded), and ε_LB (profile) is the largest ε′ whose curve of the "
        "same q and T (σ scaled) they still violate: a lower bound on the ε of that family, for any q."
    )
    blocks: list[Block] = [("p", head), ("strong", _verdict(summary))]
    accounted = next((r.accounted for r in summary.results if r.accounted is not None), None)
    if accounted is not None:
        blocks.append(("p", f"The claim: {accounted.line()}."))
    private = [r for r in summary.results if r.noise]
    if private:
        blocks.append(("p", power_line(private[0])))
    blocks += [("p", f"Warning ({r.name}): {w}.") for r in private for w in r.warnings]
    blocks.append(("table", _table(summary)))
    blocks += [("figure", path) for path in _figures(outcome, out)]
    write_pages(out, "dpaudit-mix audit", blocks)
    scores = []
    for (canary, threat, noise), attacked in outcome.attacks.items():  # for audit_scores / audit-scores
        path = out / "scores" / f"{score_label(canary, threat, noise)}.npz"
        write_npz(path, in_scores=attacked.scores_in, out_scores=attacked.scores_out)
        scores.append(path)
    owned.replace(out, "scores", scores)  # a setting the last run had and this one has not: its file goes
    write_json(out / "audit.json", summary.to_dict())
