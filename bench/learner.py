"""Benchmark: the batched DP-MixMin learner vs a per-run Opacus loop, and vs the GEMM roofline.

R = 2,000 runs, n = 9,000, k = 14, T = 100, full batch (a synthetic problem of that shape). The
Opacus figure times a few single fits through a GradSampleModule + DPOptimizer and scales to R.
The batched learner and the roofline are timed in turn, ``--repeats`` times, and their medians
reported (batched/roofline: the median of the pairs' ratios).
Prints ratios measured in this one run and writes them to bench/results/learner.md.
Usage: python bench/learner.py [--runs R] [--opacus-fits F] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import record
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from record import Ratio
from threadpoolctl import threadpool_limits

from dpaudit_mix.base.randomness import stream
from dpaudit_mix.learner import BLOCK, LearnerConfig, default_threads, fit
from dpaudit_mix.optimum import scaled_likelihoods
from dpaudit_mix.problem import Problem

N, K, T = 9_000, 14, 100


def opacus_fit(p: np.ndarray, config: LearnerConfig) -> np.ndarray:
    """One DP-MixMin fit the conventional way: per-sample gradients by Opacus, EG in torch."""
    centred = torch.tensor(p - p.mean(axis=1, keepdims=True), dtype=torch.float32)
    p_t = torch.tensor(p, dtype=torch.float32)
    layer = torch.nn.Linear(K, 1, bias=False)
    layer.weight.data.fill_(1.0 / K)
    model = GradSampleModule(layer, loss_reduction="sum")
    opt = DPOptimizer(
        torch.optim.SGD(model.parameters(), lr=1.0),
        noise_multiplier=config.noise_multiplier,
        max_grad_norm=config.clip,
        expected_batch_size=N,
        loss_reduction="sum",
    )
    for _ in range(config.steps):
        opt.zero_grad()
        with torch.no_grad():
            f = p_t @ layer.weight[0]
        (-(model(centred)[:, 0] / f).sum()).backward()
        opt.pre_step()
        with torch.no_grad():
            log_w = torch.log(layer.weight) - config.learning_rate * layer.weight.grad / N
            layer.weight.copy_(torch.softmax(log_w, dim=1))
    return layer.weight.detach().numpy()[0]


def gemm_roofline(p: np.ndarray, runs: int, threads: int) -> float:
    """Time of the two GEMMs per step alone (F = PΛ, P̃ᵀW), laid out as the learner does:
    blocks of BLOCK runs spread over ``threads`` threads, each with a single-threaded BLAS."""
    p32 = p.astype(np.float32)
    lam = np.full((K, BLOCK), 1.0 / K, dtype=np.float32)

    def block(_: int) -> None:
        for _ in range(T):
            w = p32 @ lam
            _ = p32.T @ w

    start = time.perf_counter()
    with threadpool_limits(limits=1), ThreadPoolExecutor(threads) as pool:
        list(pool.map(block, range(-(-runs // BLOCK))))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2_000)
    parser.add_argument("--opacus-fits", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="batched and roofline timed in turn, medians")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    logp = np.log(rng.beta(2.0, 1.0, size=(N, K)) ** rng.uniform(0.3, 3.0, size=K))
    prob = Problem(logp, tuple(f"s{i}" for i in range(K)))
    config = LearnerConfig(steps=T, noise_multiplier=40.0)
    threads = default_threads()
    fit(prob, config, 64, stream(0, "learner-noise", bench="warm-up"))
    times = np.empty((args.repeats, 2))
    for i in range(args.repeats):  # in turn, so a machine that slows for a while slows both
        start = time.perf_counter()
        fit(prob, config, args.runs, stream(1, "learner-noise", bench="learner"))
        times[i] = time.perf_counter() - start, gemm_roofline(logp, args.runs, threads)
    batched, roofline = np.median(times, axis=0)
    over = np.median(times[:, 0] / times[:, 1])
    p, _ = scaled_likelihoods(logp)
    torch.set_num_threads(threads)
    start = time.perf_counter()
    for _ in range(args.opacus_fits):
        opacus_fit(p, config)
    per_fit = (time.perf_counter() - start) / args.opacus_fits
    opacus_total = per_fit * args.runs
    lines = [
        f"runs={args.runs} n={N} k={K} T={T} full batch, {threads} threads",
        f"batched learner        {batched:8.2f} s   ({args.runs / batched:,.0f} runs/s)",
        f"GEMM-only roofline     {roofline:8.2f} s   batched/roofline = {over:.2f}x (median of {args.repeats} pairs)",
        f"Opacus per-run loop    {opacus_total:8.1f} s   ({per_fit:.2f} s/fit x {args.runs}; "
        f"{args.opacus_fits} fits timed)   speed-up = {opacus_total / batched:,.0f}x",
    ]
    print("\n".join(lines))
    record.write(
        "learner",
        "```\n" + "\n".join(lines) + "\n```",
        [
            Ratio("batched learner over its GEMM-only roofline", over, "lower"),
            Ratio("speed-up over the per-run Opacus loop", opacus_total / batched, "higher"),
        ],
    )


if __name__ == "__main__":
    main()
