"""The paired comparisons every report states (stats.py)."""

from __future__ import annotations

import gc
import math
import weakref

import numpy as np
from scipy.stats import ttest_1samp
from statsmodels.stats.multitest import multipletests

from dpaudit_mix.base.randomness import stream
from dpaudit_mix.base.stats import paired_tests


def test_paired_tests_are_the_t_tests_holm_corrected_across_eps() -> None:
    rng = stream(0, "simulated-scores", test="paired-tests").numpy()
    differences = {1.0: rng.normal(0.5, 1, 6), 2.0: rng.normal(0, 1, 6), 5.0: np.full(6, 0.25), 8.0: np.array([1.0])}
    table = paired_tests(differences)
    p = [ttest_1samp(differences[e], 0.0).pvalue for e in (1.0, 2.0)]
    assert np.allclose(table.loc[[1.0, 2.0], "p"], p)
    assert np.allclose(table.loc[[1.0, 2.0], "p_holm"], multipletests(p, method="holm")[1])
    assert math.isnan(table.loc[5.0, "p_holm"]) and math.isnan(table.loc[8.0, "p"])  # no spread; one seed
    assert table.loc[1.0, "std"] == np.std(differences[1.0], ddof=1) and table.loc[8.0, "std"] == 0


def test_the_heap_set_aside_for_holm_is_handed_back() -> None:
    """statsmodels' Holm collects the whole heap on each call; the objects set aside from it come
    back: nothing stays frozen, and a cycle made before the call is collected after it."""

    class Node:
        pass

    cycle = Node()
    cycle.self = cycle  # type: ignore[attr-defined]
    alive = weakref.ref(cycle)
    del cycle
    paired_tests({1.0: np.array([0.1, 0.3, 0.2]), 2.0: np.array([0.0, 0.4, -0.1])})
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert alive() is None


def test_a_heap_the_caller_froze_stays_frozen() -> None:
    gc.freeze()
    try:
        paired_tests({1.0: np.array([0.1, 0.3, 0.2]), 2.0: np.array([0.0, 0.4, -0.1])})
        assert gc.get_freeze_count() > 0  # still frozen (objects that died meanwhile leave it)
    finally:
        gc.unfreeze()
