"""A published release, as the command line and the callers of :func:`.gate.release` see it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .manifest import Digested, Manifest
from .model_manifest import ModelManifest


@dataclass(frozen=True)
class Published:
    """A published release: its folder and its manifest (release.json, exactly as hashed)."""

    out: Path
    manifest: Digested  # a Manifest (λ) or a ModelManifest

    def to_dict(self) -> dict[str, Any]:
        """What the command line says of it."""
        manifest = self.manifest
        if isinstance(manifest, ModelManifest):
            return {
                "out": str(self.out),
                "manifest": str(self.out / "release.json"),
                "model": str(self.out / manifest.model["file"]),
                "model_sha256": manifest.model["sha256"],
                "epsilon": manifest.claim.epsilon,
                "delta": manifest.claim.delta,
                "one_run_epsilon_lower_bound": manifest.audit["epsilon_lower_bound"],
                "metrics": manifest.metrics,
                "manifest_sha256": manifest.digest,
                **self._common(),
            }
        assert isinstance(manifest, Manifest), type(manifest).__name__
        return {
            "out": str(self.out),
            "manifest": str(self.out / "release.json"),
            "sources": list(manifest.sources),
            "weights": list(manifest.weights),
            "epsilon": manifest.claim.epsilon,
            "delta": manifest.claim.delta,
            "manifest_sha256": manifest.digest,
            **self._common(),
        }

    def line(self) -> str:
        """What was released, what it spent of the data set's budget and its unit, and the card,
        in one line (the command's stderr; its JSON is on stdout)."""
        manifest = self.manifest
        if isinstance(manifest, ModelManifest):  # the image track's finetune: example-level
            what, unit = "the finetuned model", "example-level"
        else:
            assert isinstance(manifest, Manifest), type(manifest).__name__
            what, unit = f"λ over {len(manifest.sources)} sources", "user" if manifest.claim.user_level else "example"
            unit += "-level"
        budget = manifest.budget
        cap = "no cap" if budget.budget_epsilon is None else f"{budget.budget_epsilon:g}"
        return (
            f"released {what} at ({manifest.claim.epsilon:g}, {manifest.claim.delta:g})-DP, {unit}; spent ε "
            f"{budget.spent_epsilon:.4g} of {cap} on this data set; card {self.out / 'release.html'}"
        )

    def _common(self) -> dict[str, Any]:
        """What both kinds say: the data set spent and its standing, and the signer."""
        manifest, signature = self.manifest, self.manifest.publication.signature or {}
        return {
            "data_sha256": manifest.publication.data["sha256"],
            "data_identity": manifest.publication.data["identity"],
            "spent_epsilon": manifest.budget.spent_epsilon,
            "budget_epsilon": manifest.budget.budget_epsilon,
            "signed_by": signature.get("fingerprint"),
        }
