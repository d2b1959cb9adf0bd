"""The text track's pretraining settings screened on public data only: each setting pretrains the
CharGRU on public windows drawn by uniform λ and is scored by perplexity on the rehearsal genre's
held-out speakers (public text the sensitive speakers never enter), with its CPU seconds.

Every setting sees the same draws per seed (a seed's windows and initial weights are named by
the seed, not by the setting), so settings are compared paired by seed: per setting, mean ± std
over seeds of perplexity and seconds, and its paired difference from the first setting with a
two-sided paired t-test (statsmodels). A setting is BATCH:RATE:COOLDOWN[:WINDOWS[:LENGTH]]
(LENGTH: characters per pretraining sequence, ``pretrain_length``).
Usage: python bench/pretraining.py [--seeds 4] [--settings 64:1.5e-2:0.2 192:3e-2:0.2:24000:16 ...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import record
import torch
from statsmodels.stats.weightstats import DescrStatsW
from threadpoolctl import threadpool_limits

from dpaudit_mix.base.randomness import Key
from dpaudit_mix.lm.run import build_text_world
from dpaudit_mix.lm.spec import load_text_pipeline_spec
from dpaudit_mix.models import chargru as lm
from dpaudit_mix.pipeline.stages import mixture_draw


def _setting(text: str, windows: int) -> tuple[int, float, float, int, int]:
    parts = text.split(":")
    return (
        int(parts[0]),
        float(parts[1]),
        float(parts[2]),
        int(parts[3]) if len(parts) > 3 else windows,
        int(parts[4]) if len(parts) > 4 else lm.WINDOW,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="pipeline/shakespeare-users.toml")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--settings", nargs="+", default=["128:3e-2:0.2:24000:24", "64:1.5e-2:0.2", "192:3e-2:0.2:24000:16"]
    )
    args = parser.parse_args()
    spec = load_text_pipeline_spec(args.spec)
    world = build_text_world(spec)
    sizes = [len(w) for w in world.source_windows]
    settings = [_setting(s, spec.pretrain_windows) for s in args.settings]
    perplexity = np.zeros((len(settings), args.seeds))
    seconds = np.zeros_like(perplexity)
    torch.set_num_threads(1)
    with threadpool_limits(1):
        for seed in range(args.seeds):
            key = Key(spec.seed).child(bench="pretraining", seed=seed)
            for i, (batch, rate, cooldown, windows, length) in enumerate(settings):
                picks = mixture_draw(sizes, [1.0] * len(sizes), windows, key.stream("pretrain-sample").numpy())
                data = np.concatenate([w[p] for w, p in zip(world.source_windows, picks, strict=True)])
                start = time.process_time()
                model = lm.pretrain(data, 1, rate, key, batch=batch, cooldown=cooldown, length=length)
                seconds[i, seed] = time.process_time() - start
                perplexity[i, seed] = lm.perplexity(model, world.rehearsal_test)
                print(f"seed {seed} {args.settings[i]}: perplexity {perplexity[i, seed]:.4f}, {seconds[i, seed]:.1f} s")
    for i, name in enumerate(args.settings):
        line = (
            f"{name:<22} perplexity {perplexity[i].mean():.4f} ± {perplexity[i].std(ddof=1):.4f}, CPU "
            f"{seconds[i].mean():.1f} ± {seconds[i].std(ddof=1):.1f} s"
        )
        if i:
            diff = perplexity[i] - perplexity[0]
            p = DescrStatsW(diff).ttest_mean()[1]
            line += f", − first {diff.mean():+.4f} ± {diff.std(ddof=1):.4f} (paired t p = {p:.3g})"
        print(line)


if __name__ == "__main__":
    with record.captured("pretraining"):
        main()
