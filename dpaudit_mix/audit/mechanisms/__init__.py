"""Audited mechanisms: a user extends the catalogue (:mod:`..catalog`) with
:func:`register_mechanism`, and an audit builds what a spec names with :func:`mechanism`.

A mechanism has ``plan(spec, full, data, noise_multiplier) -> RunPlan`` (:mod:`.base`) and may have
``check(spec)``: its rules on an audit spec, run when the spec is read, before anything is
written, and ``one_run(spec, full, data, noise_multiplier) -> RunPlan`` of a
:class:`.base.CanaryCollector`: its audit from one training run with many canaries. The
built-ins are :class:`~..catalog.Lazy` entries of the catalogue: the DP-SGD ones import torch and
Opacus, so each module is imported here, only when an audit plans with it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, cast

from ...base.errors import require
from ..catalog import DPSGD_CANARIES, MECHANISMS, Lazy, supports_one_run
from .base import Mechanism

if TYPE_CHECKING:
    from ...problem import Problem
    from ..spec import AuditSpec
    from .base import CanaryCollector, Collector, RunPlan

__all__ = ["DPSGD_CANARIES", "MECHANISMS", "Lazy", "mechanism", "register_mechanism", "supports_one_run"]


def register_mechanism(name: str, obj: Mechanism, *, replace: bool = False) -> Mechanism:
    """Make ``obj`` auditable as ``mechanism = "name"`` in an audit spec.

    Args:
      name: the name an audit spec's ``mechanism`` gives.
      obj: a mechanism: ``plan(spec, full, data, noise_multiplier) -> RunPlan`` (and, for a
        one-run audit, ``one_run``).
      replace: whether it may replace a mechanism already registered under ``name``.

    Returns:
      ``obj``.

    Raises:
      InputError: a bad name, an object without ``plan``, or a name taken (without ``replace``).
    """
    MECHANISMS.register(name, obj, replace=replace)
    return obj


def mechanism(name: str) -> Mechanism:
    """The mechanism a spec names: a user's object as registered, a built-in built from its module."""
    obj = MECHANISMS.get(name)
    return _LazyMechanism(obj) if isinstance(obj, Lazy) else cast(Mechanism, obj)


class _LazyMechanism:
    """A built-in, its plan and one-run plan from the classes its :class:`Lazy` entry names."""

    def __init__(self, entry: Lazy) -> None:
        self.entry = entry

    def check(self, spec: AuditSpec) -> None:
        self.entry.check(spec)

    def plan(self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None) -> RunPlan[Collector]:
        plan: RunPlan[Collector] = _built(self.entry.target).plan(spec, full, data, noise_multiplier)
        return plan

    def one_run(
        self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None
    ) -> RunPlan[CanaryCollector]:
        require(bool(self.entry.one_run_target), f"mechanism {spec.mechanism} has no one-run mode")
        plan: RunPlan[CanaryCollector] = _built(self.entry.one_run_target).one_run(spec, full, data, noise_multiplier)
        return plan


def _built(target: str) -> Any:
    module, cls = target.split(":")
    return getattr(import_module(module, __package__), cls)()
