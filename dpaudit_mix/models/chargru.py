"""A small character-level GRU language model over the n-gram proxies' alphabet.

Text becomes windows of ``WINDOW`` + 1 codes: each speech starts with the pad code 0 (a start
symbol), and consecutive windows overlap by one code, so every character of a text is
predicted exactly once. Weights travel between stages as npz arrays; the same seed gives the
same model.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..base.alphabet import WINDOW, V, codes
from ..base.errors import require
from ..base.randomness import Key, torch_scope


class CharGRU(nn.Module):
    """Embedding → one GRU layer → linear head over the V symbols (about 20k weights)."""

    def __init__(self, embedding: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, embedding)
        self.rnn = nn.GRU(embedding, hidden, batch_first=True)
        self.head = nn.Linear(hidden, V)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(codes))
        return self.head(out)


def windows(text: str) -> np.ndarray:
    """The text's windows, (m, WINDOW + 1) int64; the last is right-padded with −1 (not scored)."""
    return all_windows([text])


def all_windows(texts: list[str] | tuple[str, ...]) -> np.ndarray:
    """Every text's windows, in order, (Σ m, WINDOW + 1): text i, of n_i characters, is the pad
    code 0 then its codes then −1s, in m_i = max(1, ⌈n_i / WINDOW⌉) windows that overlap by one
    code. Laid out for all texts at once (the text world has tens of thousands of speeches)."""
    lowered = [t.lower() for t in texts]
    lengths = np.array([len(t) for t in lowered], dtype=np.int64)
    counts = np.maximum(1, -(-lengths // WINDOW))  # windows per text
    padded = counts * WINDOW + 1  # each text's codes with the start code and the −1 padding
    base = np.cumsum(padded) - padded  # where each text's padded codes start in ``flat``
    flat = np.full(int(padded.sum()), -1, dtype=np.int64)
    flat[base] = 0
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    flat[np.repeat(base + 1, lengths) + within] = codes("".join(lowered))
    window = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    starts = np.repeat(base, counts) + WINDOW * window
    return flat[starts[:, None] + np.arange(WINDOW + 1)]


def window_nll(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Each window's summed next-character NLL (nats), (m,); padded targets (−1) count 0."""
    inputs, targets = batch[:, :-1].clamp(min=0), batch[:, 1:]
    logits = model(inputs)
    nll = nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1, reduction="none")
    return nll.reshape(targets.shape).sum(dim=1)


def window_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-character NLL over the scored characters of ``batch``."""
    return window_nll(model, batch).sum() / (batch[:, 1:] >= 0).sum().clamp(min=1)


def new_model(key: Key) -> CharGRU:
    """A freshly initialised model, its weights drawn from ``key``'s "model-init" stream."""
    with torch_scope(key.stream("model-init")):
        return CharGRU()


def from_arrays(arrays: dict[str, np.ndarray] | None, key: Key) -> CharGRU:
    """A model with the given weights, or freshly initialised from ``key`` (no pretraining)."""
    model = new_model(key)
    if arrays is not None:
        model.load_state_dict({name: torch.from_numpy(value) for name, value in arrays.items()})
    return model


def load_model(path: str | Path) -> CharGRU:
    """A CharGRU from a weights file the text pipeline wrote (checked: :func:`.cnn.load_state`)."""
    from .cnn import load_state

    model = load_state(path, lambda arrays: CharGRU(), "chargru")
    assert isinstance(model, CharGRU)
    return model


def pieces(data: np.ndarray, length: int) -> np.ndarray:
    """Each window of ``data`` (m, WINDOW + 1) cut into WINDOW / ``length`` sequences of ``length``
    + 1 codes that overlap by one, (m · WINDOW / length, length + 1): every character is still
    predicted once, from at most ``length`` characters of context (a shorter backpropagation
    through time, run from the start state like a window)."""
    require(
        1 <= length <= WINDOW and WINDOW % length == 0,
        f"the pretraining length must divide the {WINDOW}-character window, got {length}",
    )
    return np.concatenate([data[:, i * length : (i + 1) * length + 1] for i in range(WINDOW // length)])


def pretrain(
    data: np.ndarray,
    epochs: int,
    learning_rate: float,
    key: Key,
    *,
    batch: int = 64,
    device: str = "cpu",
    cooldown: float = 0.0,
    length: int = WINDOW,
) -> CharGRU:
    """Non-private training on λ-sampled public windows (Adam), on ``device``, cut into sequences
    of ``length`` characters (:func:`pieces`), ``batch`` of them a step; the last ``cooldown``
    share of the steps at a tenth of the rate (a high rate's last iterates are noisy)."""
    model = new_model(key).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    generator = key.stream("pretrain-shuffle").torch()
    tensor = torch.from_numpy(pieces(data, length)).to(device)
    steps = epochs * math.ceil(len(tensor) / batch)
    slow_from = steps - round(cooldown * steps)  # the first step at a tenth of the rate
    step = 0
    model.train()
    for _ in range(epochs):
        for rows in torch.randperm(len(tensor), generator=generator).split(batch):
            if step == slow_from:
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate / 10
            step += 1
            optimizer.zero_grad()
            window_loss(model, tensor[rows.to(device)]).backward()
            optimizer.step()
    return model


def perplexity(model: nn.Module, data: np.ndarray, batch: int = 512) -> float:
    """exp(mean NLL per character) over every scored character of ``data`` (on the model's device)."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for rows in torch.from_numpy(data).to(next(model.parameters()).device).split(batch):
            total += float(window_nll(model, rows).sum())
            count += int((rows[:, 1:] >= 0).sum())
    return math.exp(total / count)
