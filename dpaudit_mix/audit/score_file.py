"""``dpaudit-mix audit-scores``: membership scores from any stack, read from a file, audited, and
reported like an audit (audit.json, report.md/html, tradeoff.png).

A file is an ``.npz`` with ``in_scores`` and ``out_scores``, or a ``.csv`` with columns ``score``
and ``label`` (1 = the run had the canary, 0 = it did not). Every bad input is one InputError,
raised before anything is written.
"""

from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import accounting
from ..atomic import check_output, write_json
from ..errors import InputError, require
from ..reporting import Block, save_figure, write_pages
from .report import tradeoff_figure
from .scores import AuditResult, analyse, checked_claim, checked_scores


def read_scores(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(in_scores, out_scores) from ``path``, each checked (finite, at least two)."""
    require(path.is_file(), f"scores file not found: {path}")
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as data:
                missing = [key for key in ("in_scores", "out_scores") if key not in data.files]
                require(not missing, f"{path} lacks {' and '.join(missing)} (an .npz needs in_scores and out_scores)")
                raw_in, raw_out = data["in_scores"], data["out_scores"]
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(f"cannot read {path} as .npz: {exc}") from None
        return checked_scores(raw_in, "in_scores"), checked_scores(raw_out, "out_scores")
    require(path.suffix == ".csv", f"{path}: scores come as .npz (in_scores, out_scores) or .csv (score, label)")
    try:
        rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read {path} as .csv: {exc}") from None
    require(bool(rows) and {"score", "label"} <= set(rows[0]), f"{path} needs the columns score and label")
    labels = [row["label"].strip() for row in rows]
    bad = sorted({label for label in labels if label not in ("0", "1")})
    require(not bad, f"{path}: label must be 1 (canary in) or 0 (out), got {', '.join(bad[:3])}")
    try:
        scores = np.array([float(row["score"]) for row in rows])
    except (TypeError, ValueError):
        raise InputError(f"{path}: every score must be a number") from None
    member = np.array(labels) == "1"
    return checked_scores(scores[member], "scores labelled 1"), checked_scores(scores[~member], "scores labelled 0")


def audit_score_file(
    path: Path,
    scores: tuple[np.ndarray, np.ndarray],
    epsilon: float,
    delta: float,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    confidence: float = 0.95,
    threshold: str = "bonferroni",
    seed: int = 0,
    label: str = "scores",
    out: Path | None = None,
) -> AuditResult:
    """:func:`.scores.audit_scores` on ``scores`` (in, out), as :func:`read_scores` read them from
    ``path`` (read once: the caller checks them before it makes ``out``); with ``out``, the report there."""
    scores_in, scores_out = scores
    claimed = checked_claim(epsilon, delta, phases, confidence, threshold)
    if out is not None:  # every input checked first: a refused audit makes no folder
        out = check_output(out, folder=True, inputs=[path])
    result, found = analyse(scores_in, scores_out, epsilon, delta, claimed, phases, confidence, threshold, seed, label)
    if out is not None:
        figure = save_figure(tradeoff_figure(claimed, epsilon, {label: found}), out / "tradeoff.png")
        mechanism = "; ".join(
            f"σ = {p.noise_multiplier:.4g}, q = {p.sample_rate:g}, T = {p.steps}" for p in phases or ()
        )
        claim = f"claimed (ε, δ) = ({epsilon:g}, {delta:g}) " + (f"for {mechanism}" if mechanism else "as μ-GDP")
        verdict = (
            "VIOLATION: the scores certify more leakage than the claim allows."
            if result.violation
            else "No violation: every CP point lies on or above the claimed trade-off curve, and the strict ε_LB "
            "is at most the claimed ε."
        )
        blocks: list[Block] = [
            (
                "p",
                f"Scores from {path}: {len(scores_in)} canary-in, {len(scores_out)} canary-out runs; {claim}; "
                f"{confidence:.0%} Clopper–Pearson, thresholds by '{threshold}'. μ_LB and ε_LB (GDP) are "
                + ("a bound here (full batch)." if result.gdp_is_bound else "NOT a bound here (Poisson sampling)."),
            ),
            ("strong", verdict),
            (
                "table",
                [
                    ["ε_LB", "μ_LB", "ε_LB (GDP)", "ε_LB (profile)", "profile", "AUROC [95% CI]"],
                    [
                        f"{result.epsilon_lower_bound:.3f}",
                        f"{result.mu_lower_bound:.3f}",
                        f"{result.epsilon_lower_bound_gdp:.3f}",
                        f"{result.epsilon_lower_bound_profile:.3f}",
                        "VIOLATED" if result.profile_violation else "ok",
                        f"{result.auroc:.3f} [{result.auroc_ci[0]:.3f}, {result.auroc_ci[1]:.3f}]",
                    ],
                ],
            ),
            ("figure", figure),
        ]
        write_pages(out, "dpaudit-mix audit of scores", blocks)
        write_json(
            out / "audit.json",
            {
                "claimed_epsilon": epsilon,
                "delta": delta,
                "confidence": confidence,
                "threshold_strategy": threshold,
                "claimed_tradeoff": claimed.describe(),
                "scores": str(path),
                **result.to_dict(),
            },
        )
    return result
