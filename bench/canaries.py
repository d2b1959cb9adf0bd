"""The cost of Dirac canaries inside an Opacus training: the pipeline's SmallCNN DP finetune
(models/opacus_sgd.py, its own loop) with and without m canaries attached, alternating, in one run.

Reports each configuration's wall time (median of the repeats) and their ratio (target ≤ 1.2×),
and the one-run audit of the canaried runs at the claimed σ.
Usage: python bench/canaries.py [--canaries 10000] [--examples 4000] [--epochs 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import record
import torch
from torch import nn
from torch.utils.data import TensorDataset

from dpaudit_mix import accounting
from dpaudit_mix.base.randomness import Key, stream
from dpaudit_mix.canaries import attach
from dpaudit_mix.models import cnn, opacus_sgd

DELTA, EPSILON, BATCH, CLIP, LEARNING_RATE = 1e-5, 2.0, 256, 1.0, 0.1


def _cross_entropy(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(module(x), y)


def finetune(images: np.ndarray, labels: np.ndarray, epochs: int, canaries: int, repeat: int) -> tuple[float, object]:
    data = TensorDataset(torch.from_numpy(images[:, None]), torch.from_numpy(labels))
    batches = cnn.batches_per_epoch(len(data), BATCH)
    sigma = cnn.finetune_sigma(EPSILON, DELTA, batches, epochs)
    key = Key(0).child(bench="canaries", repeat=repeat, canaries=canaries)
    private = opacus_sgd.make_private(cnn.from_arrays(None, key), len(data), BATCH, CLIP, sigma, LEARNING_RATE)
    attached = None
    if canaries:
        membership = key.stream("canary-membership").numpy()
        attached = attach(
            private.optimizer,
            canaries,
            accountant=private.engine.accountant,
            sample_rate=private.sample_rate,
            source=membership,
        )
    start = time.perf_counter()
    opacus_sgd.train(private, data, epochs, _cross_entropy, key)
    seconds = time.perf_counter() - start
    if attached is None:
        return seconds, None
    phases = [accounting.GaussianPhase(sigma, private.sample_rate, len(attached.released))]
    claimed = accounting.epsilon(phases, DELTA, "prv")
    return seconds, attached.audit(epsilon=claimed, delta=DELTA, phases=phases, accountant="prv")


def main() -> float:
    parser = argparse.ArgumentParser()
    parser.add_argument("--canaries", type=int, default=10_000)
    parser.add_argument("--examples", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = stream(0, "simulated-scores", bench="canaries").numpy()
    images = rng.random((args.examples, 28, 28)).astype(np.float32)
    labels = rng.integers(10, size=args.examples)
    times: dict[int, list[float]] = {0: [], args.canaries: []}
    audits = []
    for repeat in range(args.repeats):
        for m in times:
            seconds, result = finetune(images, labels, args.epochs, m, repeat)
            times[m].append(seconds)
            if result is not None:
                audits.append(result)
    plain, with_canaries = (float(np.median(times[m])) for m in times)
    print(f"finetune without canaries: {plain:.2f} s; with {args.canaries}: {with_canaries:.2f} s")
    print(f"ratio {with_canaries / plain:.3f} (target <= 1.2)")
    for result in audits:
        print(f"one-run audit: {result.summary()}")
    return with_canaries / plain


if __name__ == "__main__":
    with record.captured("canaries") as recorded:
        recorded.ratios.append(record.Ratio("finetune with canaries over without", main(), "lower"))
