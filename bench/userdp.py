"""User-level DP-SGD's step on the text world: the CharGRU's per-user gradients in one batched
pass against one backward pass per user (what the step did before), on the same sampled users.

35 users of the text world (the text pipeline's expected users per step), each with up to 8
windows, one thread (as pipeline stages run). The two are timed in turn, a step of each per
repeat, so a machine that slows for a while slows both: it prints the median per-step times and,
on its last line, the median of the repeats' ratios as `speed-up N×` (target ≥ 5×), and writes
them to bench/results/userdp.md. ``--profile`` also prints the share of each step spent in GEMMs
(torch profiler, self CPU time): the batched step's floor.
Usage: python bench/userdp.py [--users 35] [--repeats 15] [--profile]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import record
import torch
from record import Ratio

from dpaudit_mix.base.randomness import Key, stream
from dpaudit_mix.lm.run import build_text_world
from dpaudit_mix.lm.spec import TextPipelineSpec
from dpaudit_mix.models.chargru import new_model
from dpaudit_mix.models.userdp import per_user_gradients, user_gradient


def _paired(first: Callable[[], object], second: Callable[[], object], repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of each call, ``repeats`` times, the two in turn (after one warm-up call each)."""
    first(), second()
    times = np.empty((repeats, 2))
    for i in range(repeats):
        for j, step in enumerate((first, second)):
            start = time.perf_counter()
            step()
            times[i, j] = time.perf_counter() - start
    return times[:, 0], times[:, 1]


GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def _gemm_share(step: object, repeats: int) -> tuple[float, float]:
    """A step's profiled self CPU time and the part of it in GEMMs, in ms."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            step()  # type: ignore[operator]
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / repeats / 1e3
    return total, sum(e.self_cpu_time_total for e in events if e.key in GEMMS) / repeats / 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=35)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--profile", action="store_true", help="print each step's GEMM share")
    args = parser.parse_args()
    torch.set_num_threads(1)
    world = build_text_world(TextPipelineSpec())
    rng = stream(0, "synthetic-inputs", bench="userdp").numpy()
    users = []
    for u in rng.choice(len(world.user_windows), args.users, replace=False):
        windows = world.user_windows[u]
        users.append(torch.from_numpy(windows[np.sort(rng.permutation(len(windows))[:8])]))
    model = new_model(Key(0).child(bench="userdp"))
    loop, batched = _paired(
        lambda: torch.stack([user_gradient(model, u) for u in users]),
        lambda: per_user_gradients(model, users),
        args.repeats,
    )
    gap = per_user_gradients(model, users) - torch.stack([user_gradient(model, u) for u in users])
    speedup, spread = float(np.median(loop / batched)), np.percentile(loop / batched, [25, 75])
    lines = [
        f"{args.users} users, {sum(len(u) for u in users)} windows, 1 thread, {args.repeats} repeats (medians)",
        f"per-user loop  {np.median(loop) * 1e3:7.1f} ms per step",
        f"batched        {np.median(batched) * 1e3:7.1f} ms per step   (max |Δ| {float(gap.abs().max()):.1e})",
        f"speed-up {speedup:.1f}x (repeats' quartiles {spread[0]:.1f}x to {spread[1]:.1f}x)",
    ]
    print("\n".join(lines[:3]))
    if args.profile:
        for name, step in (
            ("per-user loop", lambda: [user_gradient(model, u) for u in users]),
            ("batched", lambda: per_user_gradients(model, users)),
        ):
            total, gemm = _gemm_share(step, args.repeats)
            print(f"{name:14s} profiled {total:7.1f} ms per step, GEMMs {gemm:6.1f} ms ({gemm / total:.0%})")
    print(lines[3])
    record.write(
        "userdp",
        "```\n" + "\n".join(lines) + "\n```",
        [Ratio("batched step's speed-up over the per-user loop", speedup, "higher")],
    )


if __name__ == "__main__":
    main()
