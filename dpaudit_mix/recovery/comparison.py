"""DP-MixMin against the uniform mixture, cell by cell: the tests behind the report's ▲.

The uniform mixture u = 1/k is one fixed λ per task, so each DP-MixMin run of a task pairs with
its task's reference: a (level, ε, ρ) cell holds ``tasks × seeds`` paired differences per metric,
oriented so that a positive difference means DP-MixMin is closer to λ★ (cos★ − cos_u, L1_u − L1,
α_u − α). Each cell gets the mean difference with its 95 % t-interval, a two-sided paired t-test,
and, below ``SMALL`` pairs where the t-test's normality cannot be taken on trust, the Wilcoxon
signed-rank test too (scipy). A cell's p is the larger of the two: rejecting only when both
reject keeps the level of each; where the differences have no spread (the t-test undefined), the
Wilcoxon test's alone. Holm's method runs over every (ε, ρ) cell of one level and one
metric, and ▲ (▼) marks a cell only where that adjusted p is below ALPHA and DP-MixMin is
better (worse). The σ = 0 row is the learner's bias floor, not a private result: it is not tested.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import wilcoxon
from statsmodels.stats.weightstats import DescrStatsW

from ..base.stats import ALPHA, holm
from .grid import Cell

#: metric → (its uniform reference, +1 where larger is closer to λ★, −1 where smaller is).
METRICS: dict[str, tuple[str, int]] = {
    "cos_star": ("cos_uniform", +1),
    "l1": ("l1_uniform", -1),
    "alpha_1e3": ("alpha_uniform_1e3", -1),
}
#: below this many pairs a cell's p also needs the Wilcoxon signed-rank test to agree.
SMALL = 30
#: fewer seeds per cell than this and the report says its tests have little power.
LOW_POWER_SEEDS = 5
BETTER, WORSE = "▲", "▼"


@dataclass(frozen=True)
class Comparison:
    """One (level, ε, ρ, metric) cell of DP-MixMin against uniform, paired by task × seed.

    Attributes:
        user_level: whether the cell is user-level DP.
        epsilon: the cell's ε.
        rho: the cell's ρ.
        metric: ``cos_star``, ``l1`` or ``alpha_1e3``.
        pairs: how many (task, seed) pairs the cell holds.
        mean: the mean improvement over uniform (positive: DP-MixMin closer to λ★).
        ci95: the mean's 95 % t-interval; None without spread.
        p_t: the two-sided paired t-test's p; NaN without spread.
        p_wilcoxon: the Wilcoxon signed-rank p, below ``SMALL`` pairs; None above.
        p: the cell's p: the larger of the two where both ran, else the one that ran.
        p_holm: ``p`` Holm-adjusted over the cells of this level and metric.
    """

    user_level: bool
    epsilon: float
    rho: float
    metric: str
    pairs: int
    mean: float
    ci95: tuple[float, float] | None
    p_t: float
    p_wilcoxon: float | None
    p: float
    p_holm: float

    @property
    def mark(self) -> str:
        """▲ where DP-MixMin is significantly closer to λ★ than uniform, ▼ where farther, else ""."""
        if math.isnan(self.p_holm) or self.p_holm >= ALPHA:
            return ""
        return BETTER if self.mean > 0 else WORSE

    def to_dict(self) -> dict[str, Any]:
        """recovery.json's row (NaN as None, so the file stays strict JSON)."""
        row = asdict(self)
        return {key: None if isinstance(v, float) and math.isnan(v) else v for key, v in row.items()} | {
            "mark": self.mark
        }


def _tested(differences: np.ndarray) -> tuple[tuple[float, float] | None, float, float | None]:
    """The 95 % interval, the t-test's p and (below SMALL pairs) the Wilcoxon p of the differences.
    Differences without spread leave the t-test undefined; where they are not all zero the
    Wilcoxon test alone decides, at any number of pairs (eight runs that all beat uniform by the
    same amount are as significant as eight that differ by a float's last bit)."""
    if len(differences) < 2 or not np.all(np.isfinite(differences)) or np.all(differences == 0):
        return None, math.nan, None
    if np.all(differences == differences[0]):
        return (float(differences[0]), float(differences[0])), math.nan, float(wilcoxon(differences).pvalue)
    stats = DescrStatsW(differences)
    low, high = stats.tconfint_mean(alpha=0.05)
    p_t = float(stats.ttest_mean(0.0)[1])
    p_w = float(wilcoxon(differences).pvalue) if len(differences) < SMALL else None
    return (float(low), float(high)), p_t, p_w


def against_uniform(cells: tuple[Cell, ...]) -> list[Comparison]:
    """Every (level, ε, ρ, metric) cell's paired comparison with uniform, Holm-adjusted per level
    and metric over the ε × ρ cells.

    Args:
        cells: the grid's cells (one per task, level, ε and ρ; no σ = 0 cells).

    Returns:
        One Comparison per (level, ε, ρ, metric), in the grid's order.
    """
    groups: dict[tuple[bool, float, float], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.user_level, float(cell.epsilon or 0.0), cell.rho), []).append(cell)
    rows: list[dict[str, Any]] = []
    for (user_level, eps, rho), group in groups.items():
        for metric, (reference, sign) in METRICS.items():
            differences = np.concatenate(
                [sign * (np.array(getattr(c.score, metric).runs) - getattr(c.score, reference)) for c in group]
            )
            ci95, p_t, p_w = _tested(differences)
            p = p_t if p_w is None else p_w if math.isnan(p_t) else max(p_t, p_w)
            rows.append(
                dict(user_level=user_level, epsilon=eps, rho=rho, metric=metric, pairs=len(differences))
                | dict(mean=float(differences.mean()), ci95=ci95, p_t=p_t, p_wilcoxon=p_w, p=p)
            )
    families: dict[tuple[bool, str], list[int]] = {}
    for i, row in enumerate(rows):
        families.setdefault((row["user_level"], row["metric"]), []).append(i)
    p_holm: dict[int, float] = {}
    for members in families.values():
        p_holm.update(zip(members, holm(pd.Series([rows[i]["p"] for i in members])), strict=True))
    return [Comparison(**row, p_holm=float(p_holm[i])) for i, row in enumerate(rows)]
