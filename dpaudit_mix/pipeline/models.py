"""The finetuned model of every pipeline run, written beside its report (issue #35).

``OUT/models/<task>-<method>-eps<ε>-seed<s>.npz`` holds the network's state as float32 arrays
(``models.networks.load_model(path, network)`` reads an image network back, without pickle;
``models.chargru.load_model(path)`` the text track's), and
``OUT/models/index.json`` says of each file what made it: the network's registered name,
method, ε, seed, task, its sha256, its outputs, its test metrics (or perplexity) and its privacy
(``releasable`` is false for the non-private upper bound, whose λ saw all the private data).
These are an experiment's models, seeded unless the run was ``--secure``; a model meant for
release goes through ``dpaudit-mix release`` (a model spec), which audits that very finetune.
A rerun into the same folder removes the model files the last run wrote that this one does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base import owned
from ..base.atomic import write_json, write_npz
from ..base.cache import sha256
from .stages import Run

FOLDER = "models"
#: what a run's entry says of its model's test scores (the image track's metrics, the text track's perplexities).
SCORES = ("metrics", "perplexity", "pretrained_perplexity")


def model_name(run: Run) -> str:
    job = run.job
    return f"{job.task}-{job.method}-eps{job.epsilon:g}-seed{job.seed}.npz"


def write_models(out: Path, runs: list[Run], network: str) -> list[dict[str, Any]]:
    """Each run's weights (of ``network``: a registered image network, or ``chargru``) and the
    index; returns the index's entries (runs without a model are left out)."""
    folder = out / FOLDER
    entries: list[dict[str, Any]] = []
    for run in runs:
        if run.model is None:
            continue
        path = folder / model_name(run)
        write_npz(path, **run.model)
        scores: dict[str, Any] = {k: run.result[k] for k in SCORES if k in run.result}
        entries.append(
            {
                "file": path.name,
                "sha256": sha256(path),
                "network": network,
                "outputs": int(run.model["head.bias"].shape[0]),
                "task": run.job.task,
                "method": run.job.method,
                "epsilon": run.job.epsilon,
                "seed": run.job.seed,
                "secure": run.secure,
                **scores,
                **run.privacy.to_dict(),
            }
        )
    if entries:
        write_json(folder / "index.json", entries)
    written = [folder / e["file"] for e in entries] + ([folder / "index.json"] if entries else [])
    owned.replace(out, FOLDER, written)
    return entries
