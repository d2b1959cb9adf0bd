"""The catalogue of auditable mechanisms, by the name an audit spec gives (``mechanism = ...``):
what an :class:`~.spec.AuditSpec` reads when it is checked, one floor below the mechanisms.

A spec needs only a mechanism's rules (its ``check``) and whether it has a one-run mode; the
mechanisms themselves (:mod:`.mechanisms`, which take an ``AuditSpec`` and import torch) fill this
catalogue and are built from it above it. The built-ins are :class:`Lazy` entries: the module
that implements each is named here as data and imported by :func:`.mechanisms.mechanism` at its
first plan, so that reading a spec never loads torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..base.errors import InputError, require
from ..base.registry import Registry

#: the canaries a DP-SGD mechanism is audited with: the Dirac ("max_clip") canary only.
DPSGD_CANARIES = ("max_clip",)


class SpecFields(Protocol):
    """What the built-in rules read of an audit spec."""

    @property
    def mechanism(self) -> str: ...
    @property
    def canaries(self) -> tuple[str, ...]: ...
    @property
    def user_level(self) -> bool: ...
    @property
    def sample_rate(self) -> float: ...
    @property
    def steps(self) -> int: ...


@dataclass(frozen=True)
class Lazy:
    """A built-in mechanism: its class ``module:cls`` (relative to :mod:`.mechanisms`), built at
    its first plan; its spec rules (``rules``, torch-free) run when a spec is read."""

    target: str
    rules: tuple[str, ...] = ()
    one_run_target: str = ""  # its one-run audit (``module:cls``), if it has one

    def check(self, spec: SpecFields) -> None:
        for rule in self.rules:
            RULES[rule](spec)


def _check_mechanism(name: str, obj: object) -> None:
    if isinstance(obj, Lazy):
        require(all(rule in RULES for rule in obj.rules), f"mechanism {name!r}: unknown rules {obj.rules}")
        return
    require(callable(getattr(obj, "plan", None)), f"mechanism {name!r} needs a plan(spec, full, data, sigma) method")
    for method in ("check", "one_run"):
        found = getattr(obj, method, None)
        require(found is None or callable(found), f"mechanism {name!r}: {method} must be a method")


#: every mechanism an audit spec may name: :class:`Lazy` built-ins and the user's own objects
#: (:class:`.mechanisms.base.Mechanism`), registered by :func:`.mechanisms.register_mechanism`.
MECHANISMS: Registry[object] = Registry("mechanism", "mechanisms", _check_mechanism)


def supports_one_run(name: str) -> bool:
    """Whether the mechanism ``name`` can be audited from one training run (``one_run = true``)."""
    obj = MECHANISMS.get(name)
    return bool(obj.one_run_target) if isinstance(obj, Lazy) else callable(getattr(obj, "one_run", None))


def check_spec(spec: SpecFields) -> None:
    """The mechanism's own rules on ``spec`` (an InputError naming it; a user's mechanism may
    refuse with a ValueError in its own words)."""
    check = getattr(MECHANISMS.get(spec.mechanism), "check", None)
    if check is None:
        return
    try:
        check(spec)
    except InputError:
        raise
    except ValueError as exc:
        raise InputError(f"mechanism {spec.mechanism}: {exc}") from None


def _dirac_only(spec: SpecFields) -> None:
    require(
        set(spec.canaries) <= set(DPSGD_CANARIES),
        f"mechanism {spec.mechanism} is audited with the Dirac canary only: canaries = {list(DPSGD_CANARIES)}, "
        f"got {list(spec.canaries)}",
    )


def _level(user_level: bool) -> Any:
    def rule(spec: SpecFields) -> None:
        require(
            spec.user_level == user_level,
            f"mechanism {spec.mechanism} is {'user' if user_level else 'example'}-level: "
            f"set user_level = {str(user_level).lower()}",
        )

    return rule


def _whole_epochs(spec: SpecFields) -> None:
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

MECHANISMS.register("dpmixmin", Lazy(".dpmixmin:DPMixMin"))
MECHANISMS.register(
    "opacus",
    Lazy(".dpsgd:OpacusMechanism", ("dirac-only", "example-level", "whole-epochs"), ".once:OpacusOneRun"),
)
MECHANISMS.register("user-dpsgd", Lazy(".dpsgd:UserDPSGDMechanism", ("dirac-only", "user-level"), ".once:UserOneRun"))
