"""Per-example gradients that are NaN or inf never reach a DP-SGD update.

Opacus' DPOptimizer (1.6.0, measured) clips by multiplying each per-sample gradient by
C / (‖g‖ + 1e-6) clamped at 1: a NaN or inf gradient makes that factor NaN (inf · 0 is NaN), the
clipped sum NaN, and the released update NaN whenever the example is sampled, so its membership
shows with certainty (Re:cord-play, arXiv 2602.17454, found this in 12 libraries). The guard sets
such an example's whole per-sample gradient to 0 before clipping: the per-example function stays
bounded by C, so the accountant's claim is kept, and the example counts as absent.
"""

from __future__ import annotations

from typing import Any


def guard_nonfinite(optimizer: Any) -> Any:
    """Zero every per-sample gradient of an example that has a NaN or inf anywhere, before
    ``optimizer`` (an Opacus DPOptimizer) clips; returns the optimizer."""
    import torch
    from opacus.optimizers import DPOptimizer

    if not isinstance(optimizer, DPOptimizer):
        raise ValueError(f"guard_nonfinite takes an Opacus DPOptimizer, got {type(optimizer).__name__}")
    clip_and_accumulate = optimizer.clip_and_accumulate

    def guarded() -> None:
        params = [p for p in optimizer.params if getattr(p, "grad_sample", None) is not None]
        flats = [optimizer._get_flat_grad_sample(p) for p in params]
        if flats:
            bad = torch.zeros(len(flats[0]), dtype=torch.bool, device=flats[0].device)
            for flat in flats:
                bad |= ~torch.isfinite(flat.reshape(len(flat), -1)).all(dim=1)
            if bool(bad.any()):
                for p, flat in zip(params, flats, strict=True):
                    p.grad_sample = torch.where(bad.reshape(-1, *[1] * (flat.dim() - 1)), 0.0, flat)
        clip_and_accumulate()

    optimizer.clip_and_accumulate = guarded
    return optimizer
