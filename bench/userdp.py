"""User-level DP-SGD's step on the text world: the CharGRU's per-user gradients in one batched
pass against one backward pass per user (what the step did before), on the same sampled users.

35 users of the text world (the text pipeline's expected users per step), each with up to 8
windows, one thread (as pipeline stages run). Prints both per-step times from this one run and,
on its last line, their ratio as `speed-up N×` (target ≥ 5×). ``--profile`` also prints the
share of each step spent in GEMMs (torch profiler, self CPU time): the batched step's floor.
Usage: python bench/userdp.py [--users 35] [--repeats 10] [--profile]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from dpaudit_mix.base.randomness import Key, stream
from dpaudit_mix.lm.run import build_text_world
from dpaudit_mix.lm.spec import TextPipelineSpec
from dpaudit_mix.models.chargru import new_model
from dpaudit_mix.models.userdp import per_user_gradients, user_gradient


def _seconds(step: object, repeats: int) -> float:
    step()  # type: ignore[operator]
    start = time.perf_counter()
    for _ in range(repeats):
        step()  # type: ignore[operator]
    return (time.perf_counter() - start) / repeats


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
    parser.add_argument("--repeats", type=int, default=10)
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
    batched = _seconds(lambda: per_user_gradients(model, users), args.repeats)
    loop = _seconds(lambda: torch.stack([user_gradient(model, u) for u in users]), args.repeats)
    gap = per_user_gradients(model, users) - torch.stack([user_gradient(model, u) for u in users])
    print(f"{args.users} users, {sum(len(u) for u in users)} windows, 1 thread")
    print(f"per-user loop  {loop * 1e3:7.1f} ms per step")
    print(f"batched        {batched * 1e3:7.1f} ms per step   (max |Δ| {float(gap.abs().max()):.1e})")
    if args.profile:
        for name, step in (
            ("per-user loop", lambda: [user_gradient(model, u) for u in users]),
            ("batched", lambda: per_user_gradients(model, users)),
        ):
            total, gemm = _gemm_share(step, args.repeats)
            print(f"{name:14s} profiled {total:7.1f} ms per step, GEMMs {gemm:6.1f} ms ({gemm / total:.0%})")
    print(f"speed-up {loop / batched:.1f}x")


if __name__ == "__main__":
    main()
