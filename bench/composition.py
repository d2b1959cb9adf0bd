"""Sequential against parallel composition at the same total ε (the paper's Table 6).

Reads two pipeline results.csv files (same world, seeds and ε; one run with each composition) and
prints, per method present in both, the metric of each (macro AUC for image worlds, test
perplexity for the text world) and the paired difference over seeds with its two-sided paired
t-test p-value (statsmodels).
Usage: python bench/composition.py PARALLEL/results.csv SEQUENTIAL/results.csv
"""

from __future__ import annotations

import sys

import pandas as pd
from statsmodels.stats.weightstats import DescrStatsW


def _metric(frame: pd.DataFrame) -> pd.Series:
    """Per (method, ε, seed): test perplexity (text pipeline) or macro AUC (image pipeline)."""
    if "perplexity" in frame:
        return frame.set_index(["method", "epsilon", "seed"])["perplexity"]
    return frame[frame["task"] == "macro"].set_index(["method", "epsilon", "seed"])["value"]


def main() -> None:
    parallel, sequential = (pd.read_csv(path) for path in sys.argv[1:3])
    both = pd.concat({"parallel": _metric(parallel), "sequential": _metric(sequential)}, axis=1, join="inner").dropna()
    for (method, eps), group in both.groupby(level=["method", "epsilon"]):
        diff = (group["sequential"] - group["parallel"]).to_numpy()
        p = DescrStatsW(diff).ttest_mean(0.0)[1] if len(diff) > 1 else float("nan")
        print(
            f"{method:<18} ε = {eps:g}: parallel {group['parallel'].mean():.4f} ± {group['parallel'].std():.4f}, "
            f"sequential {group['sequential'].mean():.4f} ± {group['sequential'].std():.4f}; sequential − "
            f"parallel {diff.mean():+.4f} ± {diff.std(ddof=1):.4f} over {len(diff)} seeds, paired t p = {p:.3g}"
        )


if __name__ == "__main__":
    main()
