"""Audited mechanisms, by the name an audit spec gives (``mechanism = ...``, :data:`..spec.MECHANISMS`).

The DP-SGD ones import torch and Opacus, so each is imported only when an audit asks for it.
"""

from __future__ import annotations

from .base import Mechanism


def mechanism(name: str) -> Mechanism:
    if name == "dpmixmin":
        from .dpmixmin import DPMixMin

        return DPMixMin()
    from .dpsgd import OpacusMechanism, UserDPSGDMechanism

    if name == "opacus":
        return OpacusMechanism()
    if name == "user-dpsgd":
        return UserDPSGDMechanism()
    raise ValueError(f"unknown mechanism {name!r}")
