"""The default specs' heavy stages on ``cuda`` against ``cpu``, from one run.

Stages, at the default specs' sizes (``--scale`` shrinks every count of examples, epochs and
steps, for a quick look): the image pretraining and Opacus DP finetune (pipeline/default.toml),
the CharGRU pretraining and user-level DP finetune (pipeline/shakespeare-users.toml), and the
EDM's training and sampling (warmsyn/default.toml). The CPU column runs on one thread, as pipeline
stages do. Prints a table and, on its last line, the total as `speed-up N×`. Without a CUDA GPU it
says so and times nothing (``--cpu-only`` times the CPU column alone, to check the script).
Usage: python bench/gpu.py [--scale 1.0] [--cpu-only]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

from dpaudit_mix.base.randomness import Key, stream
from dpaudit_mix.data import registry
from dpaudit_mix.lm.run import build_text_world
from dpaudit_mix.lm.spec import TextPipelineSpec
from dpaudit_mix.models import chargru, cnn, edm, userdp
from dpaudit_mix.pipeline.run import build_world
from dpaudit_mix.pipeline.spec import PipelineSpec
from dpaudit_mix.synth.spec import WarmSynSpec


def _count(value: float, scale: float) -> int:
    return max(1, round(value * scale))


def stages(scale: float) -> dict[str, Callable[[str], object]]:
    """Each heavy stage as a function of the device; inputs are drawn once, here."""
    image, text, synth = PipelineSpec(), TextPipelineSpec(), WarmSynSpec()
    key = Key(0).child(bench="gpu")
    rng = stream(0, "synthetic-inputs", bench="gpu").numpy()
    world = build_world(image)
    public_x = np.concatenate([s.images for s in world.sources])
    public_y = np.concatenate([s.labels for s in world.sources])
    pick = rng.integers(len(public_y), size=_count(image.pretrain_examples, scale))
    private = world.split_b[: _count(len(world.split_b), scale)]
    text_world = build_text_world(text)
    windows = np.concatenate(text_world.source_windows)
    text_pick = windows[rng.integers(len(windows), size=_count(text.pretrain_windows, scale))]
    users = [text_world.user_windows[u] for u in text_world.split_b]
    user_config = userdp.UserLevelSGD(
        text.finetune_users / len(users),
        _count(text.finetune_steps, scale),
        1.0,
        text.finetune_clip,
        text.finetune_learning_rate,
        text.windows_per_user,
    )
    public = registry.world_validation(synth.world, synth.seed)
    real = public.images[: synth.public_size], public.labels[: synth.public_size]
    edm_config = edm.TrainConfig(steps=_count(synth.edm_steps, scale))
    labels = np.arange(_count(synth.synthetic_size, scale)) % edm.CLASSES

    def finetune_image(device: str) -> object:
        return cnn.dp_finetune(
            cnn.from_arrays(None, key),
            world.train_images[private],
            world.train_labels[private],
            epsilon=1.0,
            delta=image.delta,
            epochs=_count(image.finetune_epochs, scale),
            batch=image.finetune_batch,
            learning_rate=image.finetune_learning_rate,
            clip=image.finetune_clip,
            key=key,
            device=device,
        )

    return {
        "image pretrain": lambda d: cnn.pretrain(
            public_x[pick],
            public_y[pick],
            _count(image.pretrain_epochs, scale),
            image.pretrain_learning_rate,
            key,
            device=d,
        ),
        "image DP finetune (Opacus)": finetune_image,
        "text pretrain": lambda d: chargru.pretrain(
            text_pick,
            _count(text.pretrain_epochs, scale),
            text.pretrain_learning_rate,
            key,
            batch=text.pretrain_batch,
            device=d,
            cooldown=text.pretrain_cooldown,
            length=text.pretrain_length,
        ),
        "text user-level DP finetune": lambda d: userdp.train(
            chargru.new_model(key), users, user_config, key, device=d
        ),
        "EDM train + sample": lambda d: edm.sample(edm.train(*real, edm_config, key, d), labels, key),
    }


def _seconds(run: Callable[[str], object], device: str) -> float:
    start = time.perf_counter()
    run(device)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--cpu-only", action="store_true")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    if not gpu and not args.cpu_only:
        print("no CUDA GPU here (torch.cuda.is_available() is False): nothing to compare; --cpu-only times the CPU")
        return
    torch.set_num_threads(1)  # as pipeline stages run
    devices = ["cpu"] + (["cuda"] if gpu and not args.cpu_only else [])
    if gpu:
        print(f"GPU: {torch.cuda.get_device_name(0)}")
    totals = dict.fromkeys(devices, 0.0)
    print(f"{'stage':32s}" + "".join(f"{d:>10s}" for d in devices) + ("   speed-up" if len(devices) == 2 else ""))
    for name, run in stages(args.scale).items():
        if "cuda" in devices:
            run("cuda")  # warm-up: CUDA context and kernels, not part of the stage's time
        seconds = {d: _seconds(run, d) for d in devices}
        for d in devices:
            totals[d] += seconds[d]
        ratio = f"{seconds['cpu'] / seconds['cuda']:10.1f}x" if len(devices) == 2 else ""
        print(f"{name:32s}" + "".join(f"{seconds[d]:9.1f}s" for d in devices) + ratio)
    print(f"{'total':32s}" + "".join(f"{totals[d]:9.1f}s" for d in devices))
    if len(devices) == 2:
        print(f"speed-up {totals['cpu'] / totals['cuda']:.1f}x")


if __name__ == "__main__":
    main()
