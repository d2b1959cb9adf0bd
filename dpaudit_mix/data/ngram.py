"""Character n-gram language models with Witten–Bell interpolation: the text world's proxies.

Text is lower-cased onto a fixed alphabet (anything else is one "other" symbol), so every model
gives every character a positive probability. P_k(c | h_k) for the last k characters h_k is
(C(h_k c) + T(h_k) P_{k−1}(c | h_{k−1})) / (C(h_k) + T(h_k)), with T(h) the number of distinct
characters seen after h (Witten & Bell 1991), down to the uniform P_{−1} over the V − 1 symbols
that can occur (the start pad cannot). Counts are kept
as sorted integer keys, so training and scoring are numpy lookups, not Python loops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..base.alphabet import V, encode


def _keys(sequences: list[np.ndarray], order: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Per context length k < order, the key of (last k characters) for every scored position,
    plus each position's character and the sequence it belongs to."""
    padded = [np.concatenate([np.zeros(order - 1, np.int64), s]) for s in sequences]
    chars = np.concatenate([p[order - 1 :] for p in padded])
    owner = np.concatenate([np.full(len(s), i) for i, s in enumerate(sequences)])
    contexts = []
    for k in range(order):
        ctx = np.zeros(len(chars), np.int64)
        for j in range(1, k + 1):  # the j-th previous character
            ctx = ctx * V + np.concatenate([p[order - 1 - j : len(p) - j] for p in padded])
        contexts.append(ctx)
    return contexts, chars, owner


def _count(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values, counts = np.unique(keys, return_counts=True)
    return values, counts


def _lookup(table: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    """The count of every key (0 for keys never seen)."""
    values, counts = table
    if len(values) == 0:
        return np.zeros(len(keys))
    at = np.minimum(np.searchsorted(values, keys), len(values) - 1)
    return np.where(values[at] == keys, counts[at], 0)


@dataclass(frozen=True)
class CharNGram:
    order: int
    joint: tuple[tuple[np.ndarray, np.ndarray], ...]  # per k: counts of (context, character)
    context: tuple[tuple[np.ndarray, np.ndarray], ...]  # per k: counts of the context
    types: tuple[tuple[np.ndarray, np.ndarray], ...]  # per k: distinct characters after the context

    @classmethod
    def fit(cls, texts: list[str], order: int = 4) -> CharNGram:
        contexts, chars, _ = _keys([encode(t) for t in texts], order)
        joint, context, types = [], [], []
        for ctx in contexts:
            pairs = _count(ctx * V + chars)
            joint.append(pairs)
            context.append(_count(ctx))
            types.append(_count(pairs[0] // V))
        return cls(order, tuple(joint), tuple(context), tuple(types))

    def mean_log_likelihood(self, texts: list[str]) -> np.ndarray:
        """Each text's mean per-character natural-log likelihood (≤ 0)."""
        contexts, chars, owner = _keys([encode(t) for t in texts], self.order)
        prob = np.full(len(chars), 1.0 / (V - 1))  # uniform over the symbols that can occur (not the pad)
        for k, ctx in enumerate(contexts):
            n_ctx = _lookup(self.context[k], ctx).astype(float)
            t_ctx = _lookup(self.types[k], ctx).astype(float)
            n_pair = _lookup(self.joint[k], ctx * V + chars).astype(float)
            seen = n_ctx > 0
            prob = np.where(seen, (n_pair + t_ctx * prob) / np.maximum(n_ctx + t_ctx, 1.0), prob)
        sums = np.bincount(owner, weights=np.log(prob), minlength=len(texts))
        return sums / np.maximum(np.bincount(owner, minlength=len(texts)), 1)


def text_arrays(
    sources: Sequence[tuple[str, Sequence[str]]],
    train: Sequence[str],
    train_users: np.ndarray,
    test: Sequence[str] | None,
    test_users: np.ndarray | None,
) -> dict[str, np.ndarray]:
    """logp[j, i]: document j's mean per-character log-likelihood under source i's 4-gram model,
    for the training documents and (given) the held-out ones, with their users."""
    models = [CharNGram.fit(list(texts)) for _, texts in sources]
    arrays = {
        "names": np.array([name for name, _ in sources]),
        "users": train_users,
        "logp": np.stack([m.mean_log_likelihood(list(train)) for m in models], axis=1),
    }
    if test is not None and test_users is not None:
        arrays["test_users"] = test_users
        arrays["heldout_logp"] = np.stack([m.mean_log_likelihood(list(test)) for m in models], axis=1)
    return arrays
