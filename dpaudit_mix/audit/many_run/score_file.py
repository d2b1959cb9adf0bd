"""``dpaudit-mix audit-scores``: membership scores from any stack, read from a file, audited, and
reported like an audit (audit.json, report.md/html, tradeoff.png).

A file is an ``.npz`` with ``in_scores`` and ``out_scores``, or a ``.csv`` with columns ``score``
and ``label`` (1 = the run had the canary, 0 = it did not). A one-run file (``--one-run``) holds
one training run's canaries: an ``.npz`` with ``scores`` and ``membership`` (0/1 per canary), or
the same ``.csv`` (a row per canary, ``label`` its membership). Every bad input is one
InputError, raised before anything is written.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ... import accounting
from ...base import npz
from ...base.atomic import check_output, write_json
from ...base.errors import InputError, require
from ...base.reporting import Block, progress_steps, save_figure, write_pages
from ..attack import AttackResult
from ..claim import checked_claim, claimed_curve
from ..one_run.audit import OneRunResult, audit_one_run, checked_canaries
from ..one_run.report import write_canary_report
from ..profile import TradeOff
from .report import tradeoff_figure
from .scores import STEPS, Audited, AuditResult, checked_scores
from .words import power_line, verdict_line

#: the arrays an ``.npz`` score file may hold: the audited canary's scores, and optionally the
#: σ = 0 control's (the same attack on runs without noise), which tells a blind attack apart.
NPZ_KEYS = ("in_scores", "out_scores", "control_in", "control_out")


#: the bytes per score an audit of a scores file was measured to peak at (``bench/score_memory.py``):
#: the scores as float64 and one sorted copy under the package's bonferroni, which counts on sorted
#: scores alone; the other rules rank, concatenate and permute all the runs, and simulate its power.
BYTES_PER_SCORE = {"bonferroni": 16}
#: the same for every other threshold rule (measured under ``split`` at 10⁷ scores a class).
OTHER_BYTES_PER_SCORE = 72
#: what the analysis holds whatever the size: chunked passes' temporaries, the report's figures.
FIXED_WORKING_BYTES = 300 * 2**20


def working_bytes(threshold: str) -> npz.Working:
    """The bytes an audit under ``threshold`` works in, from the score file's headers: each score
    at its measured cost, plus the array as stored where it is not already float64."""
    per_score = BYTES_PER_SCORE.get(threshold, OTHER_BYTES_PER_SCORE)

    def working(members: Sequence[npz.Member]) -> int:
        scores = sum(m.nbytes // m.dtype.itemsize for m in members if m.dtype.itemsize)
        stored = sum(m.nbytes for m in members if m.dtype != np.float64)
        return FIXED_WORKING_BYTES + per_score * scores + stored

    return working


def read_scores(path: Path, threshold: str = "bonferroni") -> dict[str, np.ndarray]:
    """The scores in ``path`` by :data:`NPZ_KEYS` name (``control_*`` only where given), each
    checked (real numbers, finite, at least two), refused before inflating where an audit under
    ``threshold`` would not fit memory (:func:`working_bytes`)."""
    npz.check_file(path, "scores file")
    require(
        path.suffix in (".npz", ".csv"), f"{path}: scores come as .npz (in_scores, out_scores) or .csv (score, label)"
    )
    content = npz.read_file(path, "scores file")
    if path.suffix == ".npz":
        data = npz.loads(content, f"scores file {path}", working_bytes(threshold))
        missing = [key for key in NPZ_KEYS[:2] if key not in data]
        require(not missing, f"{path} lacks {' and '.join(missing)} (an .npz needs in_scores and out_scores)")
        require(("control_in" in data) == ("control_out" in data), f"{path}: control_in and control_out come together")
        return {key: checked_scores(data[key], key) for key in NPZ_KEYS if key in data}
    scores, member = _read_csv(path, content)
    return {
        "in_scores": checked_scores(scores[member], "scores labelled 1"),
        "out_scores": checked_scores(scores[~member], "scores labelled 0"),
    }


def read_canaries(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One run's canary scores and membership from ``path`` (checked by :func:`.one_run.checked_canaries`)."""
    npz.check_file(path, "canary scores file")
    require(
        path.suffix in (".npz", ".csv"),
        f"{path}: one run's canaries come as .npz (scores, membership) or .csv (score, label)",
    )
    content = npz.read_file(path, "canary scores file")
    if path.suffix == ".npz":
        data = npz.loads(content, f"canary scores file {path}")
        missing = [key for key in ("scores", "membership") if key not in data]
        require(not missing, f"{path} lacks {' and '.join(missing)} (a one-run .npz needs scores and membership)")
        return checked_canaries(data["scores"], data["membership"])
    scores, member = _read_csv(path, content)
    return checked_canaries(scores, member)


def _read_csv(path: Path, content: bytes) -> tuple[np.ndarray, np.ndarray]:
    """A CSV's ``score`` column and its ``label`` column as membership (other columns are ignored)."""
    try:
        table = list(csv.reader(io.StringIO(content.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read {path} as .csv: {exc}") from None
    require(len(table) >= 2, f"{path} needs a header row (score,label) and at least one row of scores")
    header = [name.strip() for name in table[0]]
    for name in ("score", "label"):
        count = header.count(name)
        require(count == 1, f"{path} needs exactly one '{name}' column, found {count}")
    at_score, at_label = header.index("score"), header.index("label")
    rows = table[1:]
    short = [i + 2 for i, row in enumerate(rows) if len(row) != len(header)]
    require(not short, f"{path}: line {short[0] if short else 0} has not {len(header)} fields like the header")
    labels = np.array([row[at_label].strip() for row in rows])
    bad = sorted({str(label) for label in labels if label not in ("0", "1")})
    require(not bad, f"{path}: label must be 1 (canary in) or 0 (out), got {', '.join(bad[:3])}")
    try:
        scores = np.array([float(row[at_score]) for row in rows])
    except ValueError:
        raise InputError(f"{path}: every score must be a number") from None
    return scores, labels == "1"


#: from this many scores on, each step of the analysis takes a second or more: a bar shows them.
PROGRESS_RUNS = 1_000_000


def audit_score_file(
    path: Path,
    scores: dict[str, np.ndarray],
    *,
    epsilon: float,
    delta: float,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    confidence: float = 0.95,
    threshold: str = "bonferroni",
    seed: int = 0,
    label: str = "scores",
    out: Path | None = None,
    accountant: str = accounting.DEFAULT_ACCOUNTANT,
    progress: bool = False,
    curve: str | None = None,
) -> AuditResult:
    """:func:`.scores.audit_scores` on ``scores`` as :func:`read_scores` read them from ``path``
    (read once: the caller checks them before it makes ``out``); with ``out``, the report there.
    ``progress``: a bar of the analysis' steps on stderr, from PROGRESS_RUNS scores on;
    ``curve="gdp"``: without phases, the mechanism is stated to be μ-GDP."""
    claimed = checked_claim(
        epsilon, delta, phases=phases, confidence=confidence, threshold=threshold, accountant=accountant
    )
    claimed_curve(phases, curve, delta)
    if out is not None:  # every input checked first: a refused audit makes no folder
        out = check_output(out, folder=True, inputs=[path])
    audited = Audited(epsilon, delta, claimed, phases, confidence, threshold, seed, accountant)
    runs = sum(len(v) for v in scores.values())
    steps = len(STEPS) * (1 + ("control_in" in scores))
    with progress_steps(steps, "audit-scores", show=progress and runs >= PROGRESS_RUNS) as step:
        result, found = audited.scored(scores, label, step=step, curve=curve)
    if out is not None:
        _write_report(
            out,
            path=path,
            scores=scores,
            result=result,
            found=found,
            claimed=claimed,
            epsilon=epsilon,
            delta=delta,
            phases=phases,
            confidence=confidence,
            threshold=threshold,
            label=label,
        )
    return result


def _write_report(
    out: Path,
    *,
    path: Path,
    scores: dict[str, np.ndarray],
    result: AuditResult,
    found: AttackResult,
    claimed: TradeOff,
    epsilon: float,
    delta: float,
    phases: Sequence[accounting.GaussianPhase] | None,
    confidence: float,
    threshold: str,
    label: str,
) -> None:
    """report.md/html, tradeoff.png and audit.json of one score file's audit in ``out``."""
    figure = save_figure(tradeoff_figure(claimed, epsilon, {label: found}), out / "tradeoff.png")
    mechanism = "; ".join(f"σ = {p.noise_multiplier:.4g}, q = {p.sample_rate:g}, T = {p.steps}" for p in phases or ())
    claim = f"claimed (ε, δ) = ({epsilon:g}, {delta:g}) " + (
        f"for {mechanism}"
        if mechanism
        else "as μ-GDP (curve 'gdp' stated)"
        if result.curve == "gdp"
        else f"alone ({'pure ε: ' if delta == 0 else ''}no phases, no curve stated)"
    )
    gdp = (
        "a bound here (every phase stated full batch)."
        if result.gdp_is_bound
        else "NOT a bound here (no full-batch phases stated: the Gaussian curve is assumed, not known)."
    )
    control_text = (
        "No σ = 0 control scores were given, so a blind attack would pass in silence."
        if result.control is None
        else f"σ = 0 control: {verdict_line(result.control, epsilon)}"
        + (" INCONCLUSIVE: even the control stays within the claim." if result.inconclusive else "")
    )
    blocks: list[Block] = [
        (
            "p",
            f"Scores from {path.name}: {len(scores['in_scores'])} canary-in, {len(scores['out_scores'])} "
            f"canary-out runs; {claim}; {confidence:.0%} Clopper–Pearson, thresholds by '{threshold}'. "
            f"μ_LB and ε_LB (GDP) are {gdp} ε_LB (profile) is a lower bound on the ε of the claimed "
            "mechanism's σ-scaled family (same q and T), not on any mechanism's ε.",
        ),
        ("strong", verdict_line(result, epsilon)),
        *(() if result.accounted is None else (("p", f"The claim: {result.accounted.line()}."),)),
        ("p", power_line(result)),
        ("p", control_text),
        *(("p", f"Warning: {w}.") for w in result.warnings),
        (
            "table",
            [
                ["ε_LB", "μ_LB", "ε_LB (GDP)", "ε_LB (profile)", "curve", "AUROC [95% CI]"],
                [
                    f"{result.epsilon_lower_bound:.3f}",
                    f"{result.mu_lower_bound:.3f}",
                    _figure(result.epsilon_lower_bound_gdp),
                    _figure(result.epsilon_lower_bound_profile),
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
            "scores": path.name,
            **result.to_dict(),
        },
    )


def _figure(value: float) -> str:
    """A report's number: "—" where it does not exist (a μ-GDP ε at δ = 0 is unbounded)."""
    return f"{value:.3f}" if np.isfinite(value) else "—"


def audit_canary_file(
    path: Path,
    canaries: tuple[np.ndarray, np.ndarray],
    *,
    epsilon: float,
    delta: float,
    phases: Sequence[accounting.GaussianPhase] | None = None,
    confidence: float = 0.95,
    out: Path | None = None,
    accountant: str = accounting.DEFAULT_ACCOUNTANT,
    seed: int | None = None,
    label: str = "scores",
) -> OneRunResult:
    """:func:`.one_run.audit_one_run` on one run's canaries as :func:`read_canaries` read them
    (``seed`` and ``label`` name the stream that ranks tied scores); with ``out``, audit.json and
    report.md/html there (made only after every check)."""
    checked_claim(epsilon, delta, phases=phases, confidence=confidence, threshold="bonferroni", accountant=accountant)
    if out is not None:  # every input checked first: a refused audit makes no folder
        out = check_output(out, folder=True, inputs=[path])
    result = audit_one_run(
        *canaries,
        epsilon=epsilon,
        delta=delta,
        phases=phases,
        confidence=confidence,
        accountant=accountant,
        seed=seed,
        label=label,
    )
    if out is not None:
        write_canary_report(out, result, *canaries, source=path.name, phases=phases)
    return result
