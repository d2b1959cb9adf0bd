"""Distances between mixture weights (rows of ``a`` against ``b``; any leading shape)."""

from __future__ import annotations

import numpy as np


def cos_similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """cos(a, b) along the last axis: cos★ = cos(λ_DP, λ★), cos_u = cos(u, λ★)."""
    return np.sum(a * b, axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def l1_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(np.abs(a - b), axis=-1)
