"""Two pipeline runs of the same grid against each other, paired by (method, ε, seed): sequential
against parallel composition at the same total ε (the paper's Table 6), or two pretrainings.

Reads two results.csv files (same world, seeds and ε) and prints, per method and ε present in
both, the metric of each (macro AUC for image worlds, test perplexity for the text world) and
the paired difference (second − first) over seeds with its two-sided paired t-test p-value
(statsmodels); then the same per method over every ε and seed, and over every run that was
pretrained (every method but ``no_pretrain``).
Usage: python bench/composition.py FIRST/results.csv SECOND/results.csv [--labels parallel sequential]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import record
from statsmodels.stats.weightstats import DescrStatsW


def _metric(frame: pd.DataFrame) -> pd.Series:
    """Per (method, ε, seed): test perplexity (text pipeline) or macro AUC (image pipeline)."""
    if "perplexity" in frame:
        return frame.set_index(["method", "epsilon", "seed"])["perplexity"]
    return frame[frame["task"] == "macro"].set_index(["method", "epsilon", "seed"])["value"]


def _line(name: str, first: pd.Series, second: pd.Series, labels: tuple[str, str]) -> str:
    diff = (second - first).to_numpy()
    spread = np.std(diff, ddof=1) if len(diff) > 1 else float("nan")
    p = DescrStatsW(diff).ttest_mean(0.0)[1] if spread > 0 else float("nan")  # nan: one run, or all equal
    return (
        f"{name}: {labels[0]} {first.mean():.4f} ± {first.std():.4f}, {labels[1]} {second.mean():.4f} ± "
        f"{second.std():.4f}; {labels[1]} − {labels[0]} {diff.mean():+.4f} ± {spread:.4f} over {len(diff)} "
        f"runs, paired t p = {p:.3g}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--labels", nargs=2, default=("parallel", "sequential"))
    args = parser.parse_args()
    labels = (args.labels[0], args.labels[1])
    both = pd.concat(
        {"a": _metric(pd.read_csv(args.first)), "b": _metric(pd.read_csv(args.second))}, axis=1, join="inner"
    ).dropna()
    for (method, eps), group in both.groupby(level=["method", "epsilon"]):
        print(_line(f"{method:<18} ε = {eps:g}", group["a"], group["b"], labels))
    for method, group in both.groupby(level="method"):
        print(_line(f"{method:<18} every ε", group["a"], group["b"], labels))
    pretrained = both[both.index.get_level_values("method") != "no_pretrain"]
    print(_line("every pretrained run", pretrained["a"], pretrained["b"], labels))


if __name__ == "__main__":
    with record.captured("composition"):
        main()
