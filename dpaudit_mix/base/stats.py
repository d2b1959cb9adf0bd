"""Paired comparisons over seeds, as every report states them (statsmodels).

A comparison is a set of paired differences per ε (one per seed); each ε gets the mean, the
std, a two-sided one-sample t-test of the differences against 0, and that p-value corrected by
Holm's method across the ε grid (the family is one comparison at every ε).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import DescrStatsW

COLUMNS = ["mean", "std", "seeds", "p", "p_holm"]
#: the family-wise error rate of each comparison's Holm-corrected tests across ε.
ALPHA = 0.05


def sample_std(values: Any) -> float:
    """The sample standard deviation (ddof = 1); 0 for a single value, which has no spread to estimate."""
    values = np.asarray(values, dtype=float)
    return float(values.std(ddof=1)) if len(values) > 1 else 0.0


def mean_std(values: Any, digits: int = 3, separator: str = "±") -> str:
    """ "mean±std" over seeds (or runs), the form every table and report line here uses."""
    return f"{np.mean(values):.{digits}f}{separator}{sample_std(values):.{digits}f}"


def paired_tests(differences: Mapping[float, np.ndarray]) -> pd.DataFrame:
    """One row per ε (index); p is NaN with fewer than two seeds or no spread."""
    rows = {}
    for eps, values in differences.items():
        values = np.asarray(values, dtype=float)
        testable = len(values) > 1 and np.std(values) > 0
        rows[eps] = {
            "mean": values.mean(),
            "std": sample_std(values),
            "seeds": len(values),
            "p": DescrStatsW(values).ttest_mean(0.0)[1] if testable else math.nan,
        }
    table = pd.DataFrame.from_dict(rows, orient="index", columns=COLUMNS[:4])
    table["p_holm"] = holm(table["p"])
    return table


def holm(p: pd.Series) -> pd.Series:
    """Holm's step-down adjustment of a family of p-values (statsmodels): the family-wise error
    rate stays at ALPHA however many members reject. A NaN (a member that ran no test) stays NaN
    and is not counted in the family.

    Args:
        p: the family's raw p-values, NaN where no test ran.

    Returns:
        The adjusted p-values, on ``p``'s index.
    """
    adjusted = pd.Series(math.nan, index=p.index, dtype=float)
    tested = p.notna()
    if tested.any():
        with _set_aside_heap():
            adjusted[tested] = multipletests(p[tested], method="holm")[1]
    return adjusted


@contextmanager
def _set_aside_heap() -> Iterator[None]:
    """statsmodels' Holm runs a full ``gc.collect()`` on every call: 0.44 s each in a process that
    holds torch (10 s of a small four-row pipeline's report). The objects alive before the call are
    set aside from collection for its length (``gc.freeze``) and handed back after. A heap the
    caller froze itself is left as it is (``gc.unfreeze`` would hand back its objects too)."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def verdict(row: pd.Series) -> str:
    """ "helped" / "hurt" when the Holm-corrected p is below ALPHA, "not tested" without a p-value
    (one seed, or no spread), else "no significant change"."""
    if math.isnan(row["p_holm"]):
        return "not tested"
    if row["p_holm"] >= ALPHA:
        return "no significant change"
    return "helped" if row["mean"] > 0 else "hurt"


def finding(eps: float, row: pd.Series, *, label: str, quantity: str, value: str, subject: str = "DP-MixMin") -> str:
    """One sentence for ``subject`` against ``label`` at ε: the paired ``quantity`` (formatted by
    ``value``, e.g. "+.4f" or "+.1%"), its spread, the test and the Holm-corrected p."""
    spread = value.lstrip("+")
    if math.isnan(row["p"]):
        return (
            f"ε = {eps:g}: {subject} against {label}: {quantity} {row['mean']:{value}} over "
            f"{int(row['seeds'])} seed(s): no spread, no test."
        )
    verdict = ("beats" if row["mean"] > 0 else "trails") if row["p_holm"] < ALPHA else "is not distinguishable from"
    return (
        f"ε = {eps:g}: {subject} {verdict} {label}: {quantity} {row['mean']:{value}} ± {row['std']:{spread}} over "
        f"{int(row['seeds'])} seeds, paired t-test p = {row['p']:.3g}, Holm-corrected across ε p = "
        f"{row['p_holm']:.3g} (α = {ALPHA:g})."
    )
