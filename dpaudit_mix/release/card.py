"""The card a release writes beside release.json: the claim, the audit picture and λ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..base.reporting import save_figure, subplots, write_pages
from .audit_size import power_sentence

#: the card's files (it shows λ: only a published release may keep them).
CARD = ("release.md", "release.html", "lambda.png", "tradeoff.png")


def provenance(manifest: dict[str, Any], fingerprint: str) -> str:
    """The card's line on which release this is, on which data, and who signs it: a card copied
    from another release names another id, and the fingerprint is the key to check it with."""
    data = manifest["data"]
    what = "its sensitive data's identity" if data["identity"] == "sensitive" else "identity: this file's rows only"
    charged = manifest.get("ledger") or {}
    head = charged.get("head") or {}
    on = (
        f" Charged on the ledger {charged['url']} at row {head['row']} ({head['sha256'][:16]}…)."
        if charged and head
        else ""
    )
    return (
        f"Release {manifest['release_id']}; data set {data['sha256'][:16]}… (the ledger's key: {what}).{on} "
        f"release.json, this card and its figures are signed by the Ed25519 key {fingerprint}: "
        "`dpaudit-mix check-release release.json --public-key KEY` verifies them."
    )


def lambda_bars(ax: Any, lam: np.ndarray, sources: list[str]) -> None:
    """λ as labelled bars, each beside the uniform mixture's 1/k."""
    y = np.arange(len(sources))
    ax.barh(y - 0.2, lam, height=0.4, label="released λ")
    ax.barh(y + 0.2, np.full(len(sources), 1 / len(sources)), height=0.4, label="uniform", color="lightgrey")
    ax.set(yticks=y, yticklabels=sources, xlabel="mixture weight")
    ax.invert_yaxis()
    ax.legend()


def _gdp_cells(result: dict[str, Any]) -> list[str]:
    """The Gaussian reading's two cells: the bounds where the result holds them at its top (every
    phase full batch), else its diagnostic figures, marked as no bound."""
    reading = result.get("diagnostics", {}).get("gdp_reading")
    if reading is None:
        return [f"{result['epsilon_lower_bound_gdp']:.3f}", f"{result['mu_lower_bound']:.3f}"]
    eps = reading["epsilon_lower_bound_gdp"]
    return [("—" if eps is None else f"{eps:.3f}") + " (no bound)", f"{reading['mu_lower_bound']:.3f} (no bound)"]


def write_card(manifest: dict[str, Any], out: Path, fingerprint: str) -> None:
    """release.md / release.html: the claim, the audit picture and λ beside the uniform mixture."""
    lam, sources = np.array(manifest["weights"]), manifest["sources"]
    fig, ax = subplots(figsize=(8, 0.32 * len(sources) + 1.2))
    lambda_bars(ax, lam, sources)
    claim, audit, budget = manifest["claim"], manifest["audit"], manifest["budget"]
    cap = "no cap" if budget["budget_epsilon"] is None else f"{budget['budget_epsilon']:g}"
    eps = ", ".join(f"{k} {v:.4g}" for k, v in claim["epsilon_by_accountant"].items())
    rows = [["canary", "runs", "strict ε_LB", "GDP ε_LB", "μ_LB", "profile"]]
    rows += [
        [
            r["canary"],
            str(r["runs"]),
            f"{r['epsilon_lower_bound']:.3f}",
            *_gdp_cells(r),
            "VIOLATED" if r["profile_violation"] else "ok",
        ]
        for r in audit["results"]
    ]
    blocks = [
        (
            "strong",
            f"Released: ({claim['epsilon']:g}, {claim['delta']:g})-DP mixture weights over "
            f"{len(sources)} sources ({'user' if claim['user_level'] else 'example'}-level, add/remove).",
        ),
        (
            "p",
            f"Spent ε = {budget['spent_epsilon']:.4g} of {cap} "
            f"({'user' if claim['user_level'] else 'example'}-level) on this data set after this release "
            f"(every release on it, λ and models, this one included, composed by PLD at δ = {budget['delta']:g}: "
            "parallel across disjoint splits, sequential on the same examples).",
        ),
        (
            "p",
            f"σ = {claim['noise_multiplier']:.5g} calibrated by {claim['accountant']}; q = {claim['sample_rate']:g}, "
            f"T = {claim['steps']}, C = {claim['clip']:g}. ε at δ under every accountant: {eps}. Noise from the OS "
            f"CSPRNG. Problem sha256 {manifest['inputs']['problem_sha256'][:16]}…; released {manifest['timestamp']}.",
        ),
        (
            "p",
            f"verify-accountant ({manifest['verification']['level']}): "
            f"{'PASS' if manifest['verification']['passed'] else 'FAIL'} "
            f"({', '.join(manifest['verification'].get('checks', []))}). White-box audit of this exact "
            f"configuration, {audit['confidence']:.0%} CP, thresholds '{audit['threshold_strategy']}': "
            f"{'VIOLATION' if audit['violation'] else 'no violation'}. "
            + power_sentence(audit, f"{audit.get('runs', '?')} runs per canary", "mechanism"),
        ),
        ("table", rows),
        (
            "table",
            [["source", "released λ", "uniform"]]
            + [[n, f"{w:.4f}", f"{1 / len(sources):.4f}"] for n, w in zip(sources, lam, strict=True)],
        ),
        ("p", provenance(manifest, fingerprint)),
        ("figure", out / "tradeoff.png"),
        ("figure", save_figure(fig, out / "lambda.png")),
    ]
    write_pages(out, "dpaudit-mix release", blocks, name="release")
