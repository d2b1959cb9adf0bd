"""One-run verdicts that the order of tied rows cannot steer.

Randomized response and rounded Laplace scores tie in blocks. Ranked by a stable sort, a tie was
broken by row index, and rows grouped by membership (a CSV sorted by label) handed the guesser
the membership itself: an exactly (1, 0)-DP mechanism was flagged in every audit. The guesses now
rank by (score, u), u uniform from the stream ``audit-tie-break`` named by the audit's seed and
label, drawn independently of membership: the level holds whatever the order of the rows.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit
from scipy.stats import binom

from dpaudit_mix.audit.one_run.audit import audit_one_run
from dpaudit_mix.audit.one_run.guesses import GuessSets, tie_break
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.cli import main

EPSILON, DELTA, LEVEL = 1.0, 1e-5, 0.05
ORDERS = ("out-first", "in-first", "random")


def _honest(mechanism: str, canaries: int, trial: int, epsilon: float = EPSILON) -> tuple[np.ndarray, np.ndarray]:
    """One run of an exactly ε-DP mechanism on ``canaries`` canaries, each in with probability ½:
    randomized response (the member's bit, told truly with probability e^ε/(1 + e^ε)) or the
    Laplace mechanism of a sensitivity-1 count rounded to an integer (post-processing keeps ε)."""
    source = stream(0, "simulated-scores", test="one-run-ties", mechanism=mechanism, m=canaries, trial=trial).numpy()
    member = (source.random(canaries) < 0.5).astype(np.int64)
    if mechanism == "randomized-response":
        truthful = source.random(canaries) < expit(epsilon)
        return np.where(truthful, member, 1 - member).astype(float), member
    return np.round(member + source.laplace(0.0, 1 / epsilon, canaries)), member


def _ordered(scores: np.ndarray, member: np.ndarray, order: str, trial: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows as a user may hand them over: grouped by membership either way, or shuffled."""
    if order == "random":
        rows = stream(0, "simulated-scores", test="one-run-ties-order", trial=trial).numpy().permutation(len(member))
    else:
        rows = np.argsort(member if order == "out-first" else -member, kind="stable")
    return scores[rows], member[rows]


def _flag_limit(audits: int) -> int:
    """The most flags that are no evidence against a flag rate at the level: a one-sided binomial
    test of 'rate ≤ LEVEL' rejects only above this count (at 10⁻³, so the test is not flaky)."""
    return int(binom.ppf(1 - 1e-3, audits, LEVEL))


@pytest.mark.parametrize("audits", [12, pytest.param(200, marks=pytest.mark.full)])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("mechanism", ["randomized-response", "rounded-laplace"])
@pytest.mark.parametrize("delta", [DELTA, 0.0])
def test_honest_tied_scores_keep_the_level_in_any_row_order(
    mechanism: str, order: str, audits: int, delta: float
) -> None:
    """Exactly ε-DP mechanisms, audited at their own ε (δ = 10⁻⁵, and pure ε at δ = 0) with the
    rows sorted by membership either way or shuffled: flagged no more often than the level (12
    audits of 2,000 canaries a cell here; 200 in `make full`). Before the fix, out-first was
    flagged in every audit."""
    canaries = 2000 if audits < 100 else 10_000
    flagged = 0
    for trial in range(audits):
        scores, member = _ordered(*_honest(mechanism, canaries, trial), order, trial)
        result = audit_one_run(scores, member, epsilon=EPSILON, delta=delta, seed=trial, label=mechanism)
        flagged += result.violation
    assert flagged <= _flag_limit(audits), f"{flagged} of {audits} honest audits flagged"


def test_members_first_keeps_its_power() -> None:
    """Rows with members first, randomized response at ε = 1, 10⁴ canaries: the tie-break costs
    the audit nothing; ε_LB sits near the true ε (a stable sort had put it near 0: the members'
    tied 1s were guessed in row order)."""
    bounds = []
    for trial in range(5):
        scores, member = _ordered(*_honest("randomized-response", 10_000, trial), "in-first", trial)
        bounds.append(audit_one_run(scores, member, epsilon=EPSILON, delta=DELTA, seed=trial).epsilon_lower_bound)
    assert np.median(bounds) >= 0.85, bounds


def test_a_real_leak_on_tied_scores_is_caught_in_any_order() -> None:
    """Randomized response at ε = 2 audited as ε = 1: flagged whatever the order of the rows."""
    for order in ORDERS:
        scores, member = _ordered(*_honest("randomized-response", 4000, 0, epsilon=2.0), order, 0)
        assert audit_one_run(scores, member, epsilon=EPSILON, delta=DELTA).violation, order


def test_the_tie_break_is_named_recorded_and_reproduced() -> None:
    """Same seed and label: the same verdict and counts; the result names the stream and counts
    the tied canaries; another seed draws other u (and may count other guesses)."""
    scores, member = _ordered(*_honest("randomized-response", 2000, 0), "random", 0)
    first = audit_one_run(scores, member, epsilon=EPSILON, delta=DELTA, seed=7, label="rr")
    again = audit_one_run(scores, member, epsilon=EPSILON, delta=DELTA, seed=7, label="rr")
    assert first == again
    assert first.tie_break == {
        "stream": "audit-tie-break",
        "seed": 7,
        "seed_from": "the caller",
        "label": "rr",
        "tied": 2000,
    }
    assert first.to_dict()["tie_break"] == first.tie_break
    assert not np.array_equal(tie_break(2000, 7, "rr"), tie_break(2000, 8, "rr"))
    distinct = np.arange(2000, dtype=float)
    assert audit_one_run(distinct, member, epsilon=EPSILON, delta=DELTA).tie_break["tied"] == 0


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.integers(0, 3), min_size=20, max_size=200),
    members=st.data(),
    permutation_seed=st.integers(0, 2**32 - 1),
)
def test_permuting_the_rows_never_changes_the_guesses(
    values: list[int], members: st.DataObject, permutation_seed: int
) -> None:
    """The guess sets are a function of the multiset of (score, u, membership) triples: permute
    the rows and their u alike and every set's guesses and right guesses stay. u is iid and
    independent of the rows' order, so the verdict's law is the same for every order of the rows."""
    scores = np.array(values, dtype=float)
    member = np.array(members.draw(st.lists(st.integers(0, 1), min_size=len(values), max_size=len(values))))
    u = tie_break(len(scores), 0, "property")
    rows = np.random.default_rng(permutation_seed).permutation(len(scores))
    for one_sided in (False, True):
        base = GuessSets.of(scores, member, u, one_sided=one_sided)
        moved = GuessSets.of(scores[rows], member[rows], u[rows], one_sided=one_sided)
        assert base.pairs() == moved.pairs()


def _csv(path: Path, scores: np.ndarray, member: np.ndarray) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["score", "label"])
        writer.writerows(zip(scores.tolist(), member.tolist(), strict=True))
    return path


def test_a_csv_sorted_by_label_never_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``audit-scores --one-run`` on randomized response at ε = 1, rows sorted by label
    (non-members first): exit 0 (no violation) where it had exited 3, and the tie-break named in
    audit.json."""
    scores, member = _ordered(*_honest("randomized-response", 10_000, 0), "out-first", 0)
    path = _csv(tmp_path / "sorted.csv", scores, member)
    out = tmp_path / "audit"
    argv = [
        "audit-scores",
        str(path),
        "--one-run",
        "--epsilon",
        "1",
        "--delta",
        "1e-5",
        "--seed",
        "0",
        "--out",
        str(out),
    ]
    assert main(argv) in (0, 4)
    written = json.loads((out / "audit.json").read_text())
    assert written["violation"] is False and written["tie_break"]["tied"] == 10_000
    capsys.readouterr()


def test_a_file_laid_out_by_a_known_seed_steers_only_that_seed() -> None:
    """Whoever writes the rows and knows the seed can lay the members on the high u: honest
    randomized response is then flagged (ε_LB 6.8) under that seed, and not under another. So an
    audit without a seed draws it from the OS CSPRNG (recorded: ``seed_from``), and a given seed
    is for replaying a recorded audit."""
    scores, member = _honest("randomized-response", 10_000, 0)
    rows = np.argsort(tie_break(10_000, 0, "canaries"))
    laid = np.argsort(member, kind="stable")  # non-members on the low u, members on the high u
    steered_scores, steered_member = np.empty_like(scores), np.empty_like(member)
    steered_scores[rows], steered_member[rows] = scores[laid], member[laid]
    assert audit_one_run(steered_scores, steered_member, epsilon=EPSILON, delta=DELTA, seed=0).violation
    assert not audit_one_run(steered_scores, steered_member, epsilon=EPSILON, delta=DELTA, seed=1).violation
    drawn = [audit_one_run(scores[:500], member[:500], epsilon=EPSILON, delta=DELTA).tie_break for _ in range(2)]
    assert all(t["seed_from"] == "the OS CSPRNG" for t in drawn) and drawn[0]["seed"] != drawn[1]["seed"]
