"""Image networks by name: what a pipeline spec's ``network`` (the pretrained and DP-finetuned
model) and ``proxy_network`` (the network proxies, ``proxy = "cnn"``) name.

A network is a factory ``classes -> torch.nn.Module`` taking (N, 1, H, W) float images and
returning (N, classes) logits, whose last layer is an ``nn.Linear`` named ``head`` (the per-task
protocol turns a pretrained 10-class head into a binary one) and which Opacus can make private
(no batch norm: Opacus' ModuleValidator must find nothing). ``smallcnn`` (:class:`.cnn.SmallCNN`)
is the default; :func:`register_network` adds a user's own, checked when registered, and a
package adds one through the entry-point group ``dpaudit_mix.networks`` (so the command line and
worker processes see it too). The factory itself travels with a pipeline's track to its workers.
Stages are keyed by the network's *name*: a changed factory needs a new name (or a fresh cache).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from torch import nn

from ..base.errors import InputError, require
from ..base.randomness import Key
from ..base.registry import Registry
from . import DEFAULT_NETWORK
from .cnn import Factory, SmallCNN, from_arrays, load_state


def _check_network(name: str, factory: Factory) -> None:
    require(callable(factory), f"network {name!r} must be a factory: classes -> torch.nn.Module")
    try:
        model = from_arrays(None, Key(0).child(network=name), network=factory)
    except InputError:
        raise
    except Exception as exc:  # a user's factory may fail in any way: one line naming it
        raise InputError(f"network {name!r}: factory(10) raised {type(exc).__name__}: {exc}") from None
    head = getattr(model, "head", None)
    require(
        isinstance(head, nn.Linear) and head.out_features == 10,
        f"network {name!r}: its last layer must be an nn.Linear named head with `classes` outputs",
    )
    from opacus.validators import ModuleValidator

    problems = ModuleValidator.validate(model, strict=False)
    require(not problems, f"network {name!r} is not Opacus-compatible: {problems[0] if problems else ''}")


#: every network a spec may name.
NETWORKS: Registry[Factory] = Registry("network", "networks", _check_network)


def register_network(name: str, factory: Factory, *, replace: bool = False) -> Factory:
    """Make ``factory`` the network a spec names ``name``.

    Args:
      name: the name a spec's ``network`` or ``proxy_network`` gives.
      factory: ``factory(classes) -> torch.nn.Module``, checked now: it has a head and Opacus
        can make it private.
      replace: whether it may replace a network already registered under ``name``.

    Returns:
      ``factory``.

    Raises:
      InputError: a bad name, a factory that fails its check, or a name taken.
    """
    return NETWORKS.register(name, factory, replace=replace)


def load_model(path: str | Path, network: str = DEFAULT_NETWORK) -> nn.Module:
    """A finetuned network from a weights file the image pipeline or a release wrote (an npz
    read without pickle): ten classes, or two for a ``digit-d`` task.

    Args:
      path: the weights file (``model.npz``).
      network: its registered name (the index beside a pipeline's models names it).

    Returns:
      The ``torch.nn.Module``, its weights loaded.

    Raises:
      InputError: a file that is not such weights, or weights of another network."""
    factory = NETWORKS.get(network)

    def build(arrays: dict[str, np.ndarray]) -> nn.Module:
        bias = arrays.get("head.bias")
        if bias is None or bias.ndim != 1:
            raise InputError(f"{path}: no head.bias vector: not a {network}'s weights")
        return factory(int(bias.shape[0]))

    return load_state(path, build, network)


NETWORKS.register(DEFAULT_NETWORK, SmallCNN)
