"""Audited mechanisms, by the name an audit spec gives (``mechanism = ...``): a
:class:`~..registry.Registry` a user extends with :func:`register_mechanism`.

A mechanism has ``plan(spec, full, data, noise_multiplier) -> Plan`` (:mod:`.base`) and may have
``check(spec)``: its rules on an audit spec, run when the spec is read, before anything is
written, and ``one_run(spec, full, data, noise_multiplier) -> Plan`` of a
:class:`.base.CanaryCollector`: its audit from one training run with many canaries. The
built-ins register themselves through the same call, as :class:`Lazy` entries: the DP-SGD ones
import torch and Opacus, so each module is imported only when an audit plans with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ...errors import require
from ...registry import Registry

if TYPE_CHECKING:
    from ...problem import Problem
    from ..spec import AuditSpec
    from .base import CanaryCollector, Collector, Mechanism, Plan

#: the canaries a DP-SGD mechanism is audited with: the Dirac ("max_clip") canary only.
DPSGD_CANARIES = ("max_clip",)


def _check_mechanism(name: str, obj: Any) -> None:
    require(callable(getattr(obj, "plan", None)), f"mechanism {name!r} needs a plan(spec, full, data, sigma) method")
    for method in ("check", "one_run"):
        found = getattr(obj, method, None)
        require(found is None or callable(found), f"mechanism {name!r}: {method} must be a method")


#: every mechanism an audit spec may name.
MECHANISMS: Registry[Mechanism] = Registry("mechanism", "mechanisms", _check_mechanism)


def register_mechanism(name: str, obj: Mechanism, *, replace: bool = False) -> Mechanism:
    """Make ``obj`` auditable as ``mechanism = "name"`` in an audit spec."""
    return MECHANISMS.register(name, obj, replace=replace)


def mechanism(name: str) -> Mechanism:
    return MECHANISMS.get(name)


def supports_one_run(name: str) -> bool:
    """Whether the mechanism ``name`` can be audited from one training run (``one_run = true``)."""
    obj = MECHANISMS.get(name)
    return bool(obj.one_run_target) if isinstance(obj, Lazy) else callable(getattr(obj, "one_run", None))


@dataclass(frozen=True)
class Lazy:
    """The mechanism ``module:cls`` (relative to this package), imported at its first plan; its
    spec rules (``rules``, torch-free) run when a spec is read."""

    target: str
    rules: tuple[str, ...] = ()
    one_run_target: str = ""  # its one-run audit (``module:cls``), if it has one

    def check(self, spec: AuditSpec) -> None:
        for rule in self.rules:
            RULES[rule](spec)

    def plan(self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None) -> Plan[Collector]:
        return _built(self.target).plan(spec, full, data, noise_multiplier)

    def one_run(
        self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None
    ) -> Plan[CanaryCollector]:
        require(bool(self.one_run_target), f"mechanism {spec.mechanism} has no one-run mode")
        plan: Plan[CanaryCollector] = _built(self.one_run_target).one_run(spec, full, data, noise_multiplier)
        return plan


def _built(target: str) -> Any:
    module, cls = target.split(":")
    return getattr(import_module(module, __package__), cls)()


def _dirac_only(spec: AuditSpec) -> None:
    require(
        set(spec.canaries) <= set(DPSGD_CANARIES),
        f"mechanism {spec.mechanism} is audited with the Dirac canary only: canaries = {list(DPSGD_CANARIES)}, "
        f"got {list(spec.canaries)}",
    )


def _level(user_level: bool) -> Any:
    def rule(spec: AuditSpec) -> None:
        require(
            spec.user_level == user_level,
            f"mechanism {spec.mechanism} is {'user' if user_level else 'example'}-level: "
            f"set user_level = {str(user_level).lower()}",
        )

    return rule


def _whole_epochs(spec: AuditSpec) -> None:
    batches = round(1 / spec.sample_rate)
    require(
        abs(batches * spec.sample_rate - 1) < 1e-9 and spec.steps % batches == 0,
        f"mechanism {spec.mechanism} samples at q = 1/batches and runs whole epochs: sample_rate must be 1/an "
        f"integer and steps a multiple of it, got sample_rate {spec.sample_rate:g}, steps {spec.steps}",
    )


#: the built-ins' spec rules, by name (a Lazy entry stays a small frozen, picklable value).
RULES = {
    "dirac-only": _dirac_only,
    "example-level": _level(False),
    "user-level": _level(True),
    "whole-epochs": _whole_epochs,
}

register_mechanism("dpmixmin", Lazy(".dpmixmin:DPMixMin"))
register_mechanism(
    "opacus",
    Lazy(".dpsgd:OpacusMechanism", ("dirac-only", "example-level", "whole-epochs"), ".once:OpacusOneRun"),
)
register_mechanism("user-dpsgd", Lazy(".dpsgd:UserDPSGDMechanism", ("dirac-only", "user-level"), ".once:UserOneRun"))
