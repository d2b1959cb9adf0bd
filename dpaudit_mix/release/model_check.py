"""check-release of a model manifest (``"kind": "model"``): the weights file against its
sha256 (and loadable without pickle, every weight finite), the claim recomputed from its phases
by the accountants, and the one-run audit's verdict tied to the finetune it audited. The
manifest is untrusted JSON: every field read is type-checked first."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .. import accounting
from ..audit.one_run.audit import MIN_CANARIES
from ..base import npz
from ..base.cache import sha256_bytes
from ..base.errors import InputError
from .audit_size import power_problems
from .model_manifest import ModelClaim, composed_epsilon
from .publication import field_of as _field

#: how far a recorded ε may sit from its recomputation (float formatting, not accounting).
RELATIVE, ABSOLUTE = 1e-6, 1e-9


def _phase(raw: Any, where: str) -> accounting.GaussianPhase:
    for key in ("noise_multiplier", "sample_rate"):
        _field(raw, key, (int, float), where)
    _field(raw, "steps", (int,), where)
    try:
        return accounting.GaussianPhase(raw["noise_multiplier"], raw["sample_rate"], raw["steps"])
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def _claim(manifest: dict[str, Any], where: str) -> ModelClaim:
    raw = _field(manifest, "claim", (dict,), where)
    where = f"{where}, claim"
    for key in ("epsilon", "delta", "mixture_epsilon", "finetune_epsilon", "clip", "learning_rate"):
        _field(raw, key, (int, float), where)
    for key in ("batch", "epochs"):
        _field(raw, key, (int,), where)
    for key in ("composition", "method", "finetune_accountant"):
        _field(raw, key, (str,), where)
    accounting.check_delta(raw["delta"])
    mixture = None if raw.get("mixture_phase") is None else _phase(raw["mixture_phase"], f"{where}, mixture_phase")
    values = {k: raw[k] for k in ModelClaim.__dataclass_fields__ if k not in ("mixture_phase", "finetune_phase")}
    return ModelClaim(
        **values, mixture_phase=mixture, finetune_phase=_phase(raw.get("finetune_phase"), f"{where}, finetune_phase")
    )


def check_model_release(manifest: dict[str, Any], folder: Path, where: str) -> list[str]:
    """Everything about a model release.json's own sections that does not hold; [] when it all
    does (the digest, signature and files are :mod:`.publication`'s)."""
    claim = _claim(manifest, where)
    for key in ("model", "audit", "verification", "inputs"):
        _field(manifest, key, (dict,), where)
    problems = _weights(manifest["model"], folder, f"{where}, model")
    problems += _claim_mismatch(claim)
    if manifest["verification"].get("passed") is not True:
        problems.append("verification: the manifest's own verification did not pass (verification.passed is not true)")
    problems += _audit_mismatch(manifest["audit"], claim)
    return problems + _metrics_problems(manifest)


def _metrics_problems(manifest: dict[str, Any]) -> list[str]:
    """The card's figures are read from these: metrics and each baseline's (a release made
    before baselines has none) are rates in [0, 1], the baselines over the model's own metrics."""
    metrics, baselines = manifest.get("metrics"), manifest.get("baselines", {})
    if not isinstance(baselines, dict):
        return ["baselines: not an object"]
    problems = []
    for name, table in {"metrics": metrics, **{f"baselines.{k}": v for k, v in baselines.items()}}.items():
        if not isinstance(table, dict) or not all(_rate(v) for v in table.values()):
            problems.append(f"{name}: not an object of rates in [0, 1]")
        elif isinstance(metrics, dict) and set(table) != set(metrics):
            problems.append(f"{name}: its metrics are not the released model's {sorted(metrics)}")
    return problems


def _rate(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


def _weights(model: dict[str, Any], folder: Path, where: str) -> list[str]:
    name = _field(model, "file", (str,), where)
    digest = _field(model, "sha256", (str,), where)
    path = folder / name
    if Path(name).name != name or not path.is_file():
        return [f"model: the weights file {name!r} is not beside the manifest"]
    content = path.read_bytes()
    if sha256_bytes(content) != digest:
        return [f"model: {name} does not match its sha256 (the weights were changed after release)"]
    try:
        arrays = npz.loads(content, f"the released weights {path}")
    except InputError as exc:
        return [f"model: {exc}"]
    if not arrays or not all(a.dtype.kind == "f" and np.all(np.isfinite(a)) for a in arrays.values()):
        return [f"model: {name} holds no weights, or weights that are not finite floats"]
    return []


def _claim_mismatch(claim: ModelClaim) -> list[str]:
    """Each phase's ε recomputed by the accountant that calibrated it, and the total as the
    pipeline composes them, against what the manifest says."""
    if claim.finetune_accountant not in accounting.ACCOUNTANTS:
        return [f"claim: unknown accountant {claim.finetune_accountant!r}"]
    if claim.composition not in ("parallel", "sequential"):
        return [f"claim: unknown composition {claim.composition!r}"]
    problems = []
    try:
        recomputed = {
            "mixture_epsilon": 0.0
            if claim.mixture_phase is None
            else accounting.epsilon([claim.mixture_phase], claim.delta),
            "finetune_epsilon": accounting.epsilon([claim.finetune_phase], claim.delta, claim.finetune_accountant),
        }
    except InputError as exc:
        return [f"claim: its phases cannot be accounted: {exc}"]
    for key, value in recomputed.items():
        if not math.isclose(getattr(claim, key), value, rel_tol=RELATIVE, abs_tol=ABSOLUTE):
            problems.append(f"claim: {key} recomputed {value:.6g} from its phase, manifest says {getattr(claim, key)}")
    total = composed_epsilon(ModelClaim(**{**claim.__dict__, **recomputed}))
    if claim.epsilon < total * (1 - 1e-9):
        problems.append(
            f"claim: the claimed epsilon {claim.epsilon:g} is below its phases' {claim.composition} {total:.6g}"
        )
    return problems


def _audit_mismatch(audit: dict[str, Any], claim: ModelClaim) -> list[str]:
    """A clean one-run audit of this finetune: its σ, q and T, the finetune's claimed ε, enough canaries."""
    if audit.get("violation") is not False or audit.get("profile_violation") is not False:
        return ["audit: the manifest's own one-run audit does not show a clean pass"]
    phase, problems = claim.finetune_phase, []
    for key in ("noise_multiplier", "sample_rate", "steps"):
        if audit.get(key) != getattr(phase, key):
            problems.append(
                f"audit: it ran {key} {audit.get(key)!r}, the finetune's claim says {getattr(phase, key)!r}"
            )
    if audit.get("claimed_epsilon") != claim.finetune_epsilon:
        problems.append("audit: it tested another epsilon than the finetune's claim")
    canaries, confidence = audit.get("canaries"), audit.get("confidence")
    if not isinstance(canaries, int) or isinstance(canaries, bool) or canaries < MIN_CANARIES:
        return [*problems, f"audit: {canaries!r} canaries (at least {MIN_CANARIES})"]
    if not isinstance(confidence, float) or not 0 < confidence < 1:
        return [*problems, f"audit: its confidence {confidence!r} is not in (0, 1)"]
    return problems + power_problems(
        audit,
        claim.finetune_claim,
        size=canaries,
        one_run=True,
        confidence=confidence,
    )
