"""The one fair-finetune rule: every candidate setting runs the same DP finetune on public data,
in streams of its own, and the best public score wins."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..base.randomness import Key

#: the stream identifier each rehearsed setting adds to the finetune's key.
REHEARSAL_IDS = {"learning_rate": "rehearsal_lr", "epochs": "rehearsal_epochs"}


@dataclass(frozen=True)
class Rehearsal:
    """How a track scores a rehearsed finetune on public data, and where the scores are recorded."""

    label: str  # the choice's key for the list of scored candidates
    score: str  # each candidate's score name
    higher_is_better: bool


def choose_by_rehearsal(
    candidates: Sequence[dict[str, float]],
    rehearse: Callable[[dict[str, float], Key], float],
    rehearsal: Rehearsal,
    stage: Key,
) -> dict[str, Any]:
    """The finetune's settings, by one rule for every method, at no privacy cost.

    Each candidate runs the same DP finetune (same ε, δ, clip, prior, q, T and σ) on public data and
    is scored on other public data; the test set is never looked at. Rehearsals draw from children
    of ``stage`` named by the candidate, never from the private finetune's streams. A single
    candidate is taken as it is.
    """
    if len(candidates) == 1:
        return dict(candidates[0])
    scores = [rehearse(c, stage.child(**{REHEARSAL_IDS[name]: value for name, value in c.items()})) for c in candidates]
    pick = (max if rehearsal.higher_is_better else min)(range(len(scores)), key=lambda i: scores[i])
    return {
        **candidates[pick],
        rehearsal.label: [{**c, rehearsal.score: s} for c, s in zip(candidates, scores, strict=True)],
    }
