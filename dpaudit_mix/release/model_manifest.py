"""A model release's manifest, as types: the claim of a finetuned model (its mixture's phase and
its finetune's, composed as the pipeline composes them), release.json's sections and its digest.
The gate writes one (:mod:`..pipeline.release`); check-release reads one as untrusted JSON
(:mod:`.model_check`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import accounting
from ..audit.claim import Claim
from ..base.specfile import spec_table
from .manifest import Budget, Digested, Publication

#: the released weights' file, beside release.json.
MODEL_FILE = "model.npz"


def is_model_spec(path: Path, content: bytes) -> bool:
    """Whether a release spec releases a model (it names a pipeline) rather than λ."""
    return "pipeline" in spec_table(path, content)


@dataclass(frozen=True)
class ModelClaim:
    """The released model's (ε, δ): the mixture's phase and the finetune's, composed as the
    pipeline composes them; each phase's ε by the accountant that calibrated it."""

    epsilon: float  # the total, as the pipeline composes it
    delta: float
    composition: str  # "parallel" (disjoint splits: the max) or "sequential" (PLD)
    method: str
    mixture_phase: accounting.GaussianPhase | None
    mixture_epsilon: float  # PLD; 0 for a free method
    finetune_phase: accounting.GaussianPhase
    finetune_epsilon: float
    finetune_accountant: str  # "prv" (Opacus' own calibration) alone, ours after a prior phase
    clip: float
    batch: int
    learning_rate: float
    epochs: int

    @property
    def finetune_claim(self) -> Claim:
        """The claim the finetune's one-run audit tests: its phase at its ε, by its accountant."""
        return Claim(self.finetune_epsilon, self.delta, (self.finetune_phase,), accountant=self.finetune_accountant)


def composed_epsilon(claim: ModelClaim) -> float:
    """ε of the model from its phases: sequential = both composed by PLD; parallel = the larger
    of the two (each split sees one phase)."""
    if claim.composition == "sequential":
        phases = (*((claim.mixture_phase,) if claim.mixture_phase else ()), claim.finetune_phase)
        return accounting.epsilon(phases, claim.delta)
    return max(claim.mixture_epsilon, claim.finetune_epsilon)


@dataclass(frozen=True)
class ModelManifest(Digested):
    """release.json of a model release, and its own digest."""

    model: dict[str, Any]  # file, sha256, architecture, task, classes, parameters
    metrics: dict[str, float]  # on the world's test set
    # the same metrics of what costs no further privacy: "pretrained_only" (λ's pretraining, where
    # there is one) and "chance"
    baselines: dict[str, dict[str, float]]
    claim: ModelClaim
    mixture: dict[str, Any]  # λ over the sources (None without pretraining)
    audit: dict[str, Any]  # the one-run audit of the finetune that made these weights
    verification: dict[str, Any]
    budget: Budget
    inputs: dict[str, str]
    timestamp: str
    publication: Publication

    def body(self) -> dict[str, Any]:
        return {
            "kind": "model",
            **self.publication.fields(),
            "model": dict(self.model),
            "metrics": dict(self.metrics),
            "baselines": {name: dict(values) for name, values in self.baselines.items()},
            "claim": asdict(self.claim),
            "mixture": dict(self.mixture),
            "audit": dict(self.audit),
            "verification": dict(self.verification),
            "budget": asdict(self.budget),
            "inputs": dict(self.inputs),
            "timestamp": self.timestamp,
        }
