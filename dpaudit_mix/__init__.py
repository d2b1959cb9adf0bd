"""dpaudit-mix: differentially private mixing of public data sources (DP-MixMin) and its audit.

The library surface, importable from ``dpaudit_mix`` (each name loads its module on first use, so
the command line and ``import dpaudit_mix`` stay fast):

- ``Problem``: the mixing problem, logp[j, i] = log p_i(y_j | x_j) (``problem.load`` / ``save``);
- ``mixmin``: λ★, the non-private optimum (duality-gap certified);
- ``fit``, ``LearnerConfig``: the DP-MixMin learner (runs batched; noise from a named stream or,
  with ``LearnerConfig(secure=True)``, the OS CSPRNG);
- ``calibrate``, ``epsilon``, ``GaussianPhase``: the accountant (PLD by default);
- ``Claim``: a privacy claim (ε, δ, the phases or a stated curve, the accountant), the one value
  every audit and check accepts as ``claim=`` (``Claim.from_dp_event`` reads a dp_accounting event);
- ``audit_scores``, ``AuditResult``: audit a claim from canary-in and canary-out scores of any stack;
- ``audit_one_run``, ``OneRunResult``: audit a claim from one training run's canaries (scores, membership);
- ``plan_audit``, ``Plan``: the runs (or canaries) an audit of a claim needs to catch σ/detect;
- ``run_audit``, ``AuditSpec``: the audit engine, on the DP-MixMin learner or the pipeline's DP-SGD
  (``AuditSpec(mechanism="opacus" | "user-dpsgd")``);
- ``verify``: verify-accountant (checks, and a mutation self-test);
- ``run_pipeline_file``: the pipeline of a spec file (image or text track), then its report;
- ``register_network``: your own ``torch.nn.Module`` factory for the pipeline's ``network`` (the
  pretrained and DP-finetuned model) and ``proxy_network`` (the network proxies);
- ``load_model``: a finetuned network from a pipeline run's or a release's weights file (no pickle);
- the extension API, one shape for every registry of objects, ``register_<kind>(name, obj, *,
  replace=False) -> obj``: ``register_accountant``, ``register_mechanism``, ``register_network``,
  ``register_threshold_strategy``, ``register_world`` (a world offers its capabilities by the
  Protocols of :mod:`.data.worlds`), ``register_release_kind`` (what a release of your kind
  supplies to the gate's one protocol: :mod:`.release.kinds`); and two that register a name:
  ``register_purpose(name)`` (a named random stream for your mechanism) and
  ``register_data(path)`` (a data manifest's world).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

#: modules that moved when the package took its layers' shape (base/, audit's two wings), by
#: their old name: each stays importable there, as the very module at its new home.
_MOVED = {
    "alphabet": "base.alphabet",
    "atomic": "base.atomic",
    "backend": "base.backend",
    "cache": "base.cache",
    "calibrations": "base.calibrations",
    "errors": "base.errors",
    "identity": "base.identity",
    "npz": "base.npz",
    "owned": "base.owned",
    "randomness": "base.randomness",
    "registry": "base.registry",
    "reporting": "base.reporting",
    "resources": "base.resources",
    "specfile": "base.specfile",
    "stats": "base.stats",
    "strict_json": "base.strict_json",
    "threads": "base.threads",
    "version": "base.version",
    "audit.guesses": "audit.one_run.guesses",
    "audit.fdp": "audit.one_run.fdp",
    "audit.estimate": "audit.one_run.estimate",
    "audit.one_run_power": "audit.one_run.power",
    "audit.one_run_report": "audit.one_run.report",
    "audit.gradient_canaries": "audit.one_run.gradient_canaries",
    "audit.scores": "audit.many_run.scores",
    "audit.ties": "audit.many_run.ties",
    "audit.sorted_scores": "audit.many_run.sorted_scores",
    "audit.diagnostics": "audit.many_run.diagnostics",
    "audit.words": "audit.many_run.words",
    "audit.result": "audit.many_run.result",
    "audit.report": "audit.many_run.report",
    "audit.engine": "audit.many_run.engine",
    "audit.chunks": "audit.many_run.chunks",
    "audit.score_file": "audit.many_run.score_file",
    "audit.canaries": "audit.mixmin_canaries",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a moved module's old name as the module itself (one object under both names, so
    an import, an attribute and a test's monkeypatch all reach the same code)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(f"{__name__}.") or fullname[len(__name__) + 1 :] not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(f"{__name__}.{_MOVED[spec.name[len(__name__) + 1 :]]}")
        spec.loader_state = module.__spec__  # restored over the alias's in exec_module
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state if module.__spec__ else None


if not any(isinstance(finder, _Moved) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Moved())

from .base.version import __version__ as __version__  # noqa: E402

#: each exported name and the module that defines it.
_HOMES = {
    "Problem": "problem",
    "mixmin": "optimum",
    "fit": "learner",
    "LearnerConfig": "learner",
    "calibrate": "accounting",
    "epsilon": "accounting",
    "GaussianPhase": "accounting",
    "Claim": "audit.claim",
    "audit_scores": "audit.many_run.scores",
    "AuditResult": "audit.many_run.scores",
    "audit_one_run": "audit.one_run",
    "OneRunResult": "audit.one_run",
    "plan_audit": "audit.plan",
    "Plan": "audit.plan",
    "run_audit": "audit.many_run.engine",
    "AuditSpec": "audit.spec",
    "verify": "verification.suite",
    "load_model": "models.networks",
    "register_network": "models.networks",
    "register_accountant": "accounting",
    "register_mechanism": "audit.mechanisms",
    "register_threshold_strategy": "audit.attack",
    "register_world": "data.worlds",
    "register_data": "data.registry",
    "register_purpose": "base.randomness",
    "register_release_kind": "release.kinds",
    "run_pipeline_file": "experiments",
}
__all__ = [
    "AuditResult",
    "AuditSpec",
    "Claim",
    "GaussianPhase",
    "LearnerConfig",
    "OneRunResult",
    "Plan",
    "Problem",
    "audit_one_run",
    "audit_scores",
    "calibrate",
    "epsilon",
    "fit",
    "load_model",
    "mixmin",
    "plan_audit",
    "register_accountant",
    "register_data",
    "register_mechanism",
    "register_network",
    "register_purpose",
    "register_release_kind",
    "register_threshold_strategy",
    "register_world",
    "run_audit",
    "run_pipeline_file",
    "verify",
]

if TYPE_CHECKING:
    from .accounting import GaussianPhase, calibrate, epsilon, register_accountant
    from .audit.attack import register_threshold_strategy
    from .audit.claim import Claim
    from .audit.many_run.engine import run_audit
    from .audit.many_run.scores import AuditResult, audit_scores
    from .audit.mechanisms import register_mechanism
    from .audit.one_run.audit import OneRunResult, audit_one_run
    from .audit.plan import Plan, plan_audit
    from .audit.spec import AuditSpec
    from .base.randomness import register_purpose
    from .data.registry import register_data
    from .data.worlds import register_world
    from .experiments import run_pipeline_file
    from .learner import LearnerConfig, fit
    from .models.networks import load_model, register_network
    from .optimum import mixmin
    from .problem import Problem
    from .release.kinds import register_release_kind
    from .verification.suite import verify


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'dpaudit_mix' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
