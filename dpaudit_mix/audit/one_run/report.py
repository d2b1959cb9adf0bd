"""A one-run audit in words and on a page: its verdict line, its power line, and the report
(audit.json, report.md/html, the canary-score histogram) that ``audit-scores --one-run --out``
and ``Canaries.report`` write."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ... import accounting
from ...base.atomic import write_json
from ...base.reporting import Block, save_figure, subplots, write_pages
from .audit import OneRunResult, checked_canaries


def write_canary_report(
    out: Path,
    result: OneRunResult,
    scores: np.ndarray,
    membership: np.ndarray,
    *,
    source: str,
    phases: Sequence[accounting.GaussianPhase] | None,
) -> None:
    """audit.json, report.md/html and canary_scores.png of one run's audit in ``out`` (an existing
    folder): what ``audit-scores --one-run --out`` writes, and ``Canaries.report``; ``phases`` the
    claimed σ, q and T (None: the claim is (ε, δ) alone)."""
    blocks: list[Block] = [
        ("strong", result.verdict_line()),
        ("p", _claim_text(result, phases)),
        ("p", _one_run_text(result, source)),
        ("figure", canary_figure({"one run's canary scores": scores}, membership, out)),
    ]
    write_pages(out, "dpaudit-mix one-run audit", blocks)
    write_json(out / "audit.json", {"scores": source, **result.to_dict()})


def canary_figure(scores: dict[str, np.ndarray], membership: np.ndarray, out: Path) -> Path:
    """canary_scores.png: each title's canary scores, members against non-members, one panel each
    (an engine's audit draws its private runs beside their σ = 0 controls): the picture of what
    the guesses separate."""
    fig, axes = subplots(1, len(scores), figsize=(7 * len(scores) ** 0.5, 3.2), squeeze=False)
    for ax, (title, values) in zip(axes[0], scores.items(), strict=True):
        s, b = checked_canaries(values, membership)
        bins = np.histogram_bin_edges(s, bins=40)
        ax.hist(s[b == 1], bins=bins, histtype="step", density=True, label=f"members (in), {int(b.sum())}")
        ax.hist(s[b == 0], bins=bins, histtype="step", density=True, label=f"non-members (out), {int((b == 0).sum())}")
        ax.set(xlabel="canary score (larger: more likely in)", ylabel="density", title=title)
        ax.legend(fontsize="small")
    return save_figure(fig, out / "canary_scores.png")


def _claim_text(result: OneRunResult, phases: Sequence[accounting.GaussianPhase] | None) -> str:
    """The claim audited: the mechanism's phases (σ, q, T), the accountant and m."""
    run = (
        "; ".join(f"σ = {p.noise_multiplier:.4g}, q = {p.sample_rate:.4g}, T = {p.steps}" for p in phases)
        if phases
        else "no phases given (the claim is (ε, δ) alone)"
    )
    accounted = (
        "" if result.accounted is None else f" {result.accounted.line()[0].upper()}{result.accounted.line()[1:]}."
    )
    return f"Claimed mechanism: {run}; m = {result.canaries} canaries, {result.members} of them in.{accounted}"


def one_run_power_line(result: OneRunResult) -> str:
    """What the audit could have shown: the power line, and the estimate beside it."""
    power = result.power
    caught = (
        f"not simulated: {result.power_unsimulated}" if power is None else power.line(f"{result.canaries} canaries")
    )
    return f"Power: {caught}. {result.epsilon_estimate.line()}."


def _ties(tie_break: dict[str, Any]) -> str:
    """The report's sentence on tied scores: how many, and the stream that ranked them."""
    if not tie_break.get("tied"):
        return "No two scores tie. "
    return (
        f"{tie_break['tied']} canaries share a score; ties are ranked by a uniform u from the stream "
        f"{tie_break['stream']} (seed {tie_break['seed']}, from {tie_break['seed_from']}; label {tie_break['label']}), "
        "never by row order. "
    )


def _one_run_text(result: OneRunResult, source: str) -> str:
    sides = "and the k highest alone 'in' (one-sided: the claim is subsampled) " if result.one_sided_sets else ""
    return (
        f"One training run, {result.canaries} canaries from {source} ({result.members} in). Guesses: the k "
        f"highest scores 'in' and the k lowest 'out' {sides}over sizes k fixed by the number of canaries: "
        f"{result.guess_sets} guess sets (Bonferroni); each test at level {result.level_per_test:.3g}, "
        f"{result.confidence:.0%} overall. Two methods bound the same probability, so either one's rejection "
        "counts at that level: Steinke, Nasr & Jagielski (2023) for (ε, δ) points, and Mahloujifar, Melis & "
        "Chaudhuri (2025) for whole trade-off curves (f-DP). " + _ties(result.tie_break) + one_run_power_line(result)
    )
