"""Where the models compute: the CPU (the default), or a CUDA GPU when asked for.

Only the arithmetic moves. Every random draw (initial weights, shuffles, Poisson batches, DP
noise, diffusion noise) still comes from the package's named streams or the OS CSPRNG on the CPU
and is copied to the device, so a seeded CPU run is unchanged and a GPU run draws the same
numbers; its float sums, hence its models, differ in the last bits, so its stages are cached
apart (:func:`key_ids`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from ..base.errors import require

SpecT = TypeVar("SpecT")

#: ``auto`` takes CUDA when torch sees a GPU, else the CPU.
DEVICES = ("cpu", "cuda", "auto")


def check(name: object) -> None:
    """A spec's or flag's device is one of :data:`DEVICES` (availability is :func:`resolve`'s)."""
    require(name in DEVICES, f"device must be one of {', '.join(DEVICES)}, got {name!r}")


def resolve(name: str) -> str:
    """The concrete device ("cpu" or "cuda") for ``name``; ``cuda`` without a GPU is an input error,
    raised before any work."""
    check(name)
    if name == "cpu":  # no torch import: a rerun that computes nothing never needs it
        return name
    import torch

    available = torch.cuda.is_available()
    if name == "auto":
        return "cuda" if available else "cpu"
    require(name == "cpu" or available, "device cuda: torch sees no CUDA GPU on this machine (use cpu or auto)")
    return name


def key_ids(device: str) -> dict[str, str]:
    """What a stage's content key adds for ``device``: nothing on the CPU (its keys, and so its
    cached stages, are the same as before devices existed), the device otherwise."""
    return {} if device == "cpu" else {"device": device}


def resolved(spec: SpecT) -> SpecT:
    """``spec`` (a pipeline or WarmSyn spec) with its device made concrete by :func:`resolve`."""
    return replace(spec, device=resolve(spec.device))  # type: ignore[type-var, attr-defined]
