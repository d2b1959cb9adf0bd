"""`dpaudit-mix release MODEL.toml`: the image pipeline's finetuned model, released through the gate.

read both specs once and hash those bytes → the claim, fixed before anything runs: the
mixture's phase on split A and the finetune's (σ by the pipeline's own calibration), composed as
the pipeline composes them (parallel or sequential) → reserve the budget on the ledger (both
phases charged, composed by PLD with everything else on the data: an upper bound for the
parallel split too) → verify-accountant → λ and the pretraining → the DP finetune **once**, its
noise and batches from the OS CSPRNG, with m Dirac canaries on its optimizer (membership and
sampling from the CSPRNG too) → the one-run audit of that very run against the finetune's phase
→ only then ``model.npz`` (the model's weights, no canary coordinate), the card and release.json,
and the reservation committed. A refusal withdraws the reservation and publishes no weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__, accounting
from ..atomic import write_json, write_npz
from ..audit.gradient_canaries import BYTES_PER_CANARY_STEP, Canaries, attach
from ..audit.one_run import MIN_CANARIES
from ..audit.score_file import one_run_line
from ..cache import sha256_bytes, user_cache_dir
from ..data import registry
from ..errors import InputError, require
from ..models import DEFAULT_NETWORK, cnn
from ..models.device import resolved
from ..release import gate, ledger
from ..release.gate import Refused, now
from ..release.manifest import Budget, public_path
from ..release.model_card import write_model_card
from ..release.model_manifest import MODEL_FILE, ModelClaim, ModelManifest, composed_epsilon
from ..resources import require_memory
from ..specfile import check_fields, parse_spec, read_spec_bytes, spec_table
from ..verification.suite import verify
from ..verification.variants import OPACUS
from .methods import Mixture, mix_epsilon, mixing_phase
from .run import ImageTrack, build_world, image_track
from .spec import PipelineSpec
from .stages import Job, StageCache

#: what a model release runs, so what its verification checks: λ's parts and the finetune's Opacus DP-SGD.
MODEL_PARTS = gate.LAMBDA_PARTS | {OPACUS}


@dataclass(frozen=True)
class ModelReleaseSpec:
    """A model release (``releases/*.toml`` with a ``pipeline`` key); unknown keys are rejected."""

    pipeline: str = ""  # an image pipeline spec; a relative path is relative to this spec's folder
    method: str = "dpmixmin"  # one of the pipeline's methods: how λ is chosen
    epsilon: float = 1.0  # one of the pipeline's epsilons: the released model's total ε
    task: str = "multiclass"  # the pipeline's task (digit-d under the per-task protocol)
    canaries: int = 10_000  # Dirac canaries riding on the finetune, audited from that one run
    confidence: float = 0.95
    budget_epsilon: float | None = None  # the data's cap, fixed in the ledger by its first release
    ledger: str = ""  # default: $DPAUDIT_MIX_LEDGER, else ~/.local/state/dpaudit-mix/ledger.json

    def __post_init__(self) -> None:
        check_fields(self)
        require(bool(self.pipeline), 'a model release names its pipeline spec: pipeline = "pipeline/....toml"')
        accounting.check_epsilon(self.epsilon)
        require(self.canaries >= MIN_CANARIES, f"canaries must be >= {MIN_CANARIES}, got {self.canaries}")
        require(0 < self.confidence < 1, f"confidence must be in (0, 1), got {self.confidence}")
        require(
            self.budget_epsilon is None or self.budget_epsilon >= self.epsilon,
            f"budget_epsilon must be at least this release's epsilon {self.epsilon:g}, got {self.budget_epsilon}",
        )


def _finetune_accountant(sequential: bool, mixture: accounting.GaussianPhase | None) -> str:
    return accounting.DEFAULT_ACCOUNTANT if sequential and mixture is not None else "prv"


@dataclass(frozen=True)
class Prepared:
    """Everything fixed before the first private step: the specs, the track, the job, the claim."""

    spec: ModelReleaseSpec
    pipeline: PipelineSpec
    track: ImageTrack  # secure: every private draw from the OS CSPRNG
    cache: StageCache  # the public stages (proxies, pretraining)
    job: Job
    claim: ModelClaim
    inputs: dict[str, str]


def pipeline_path(spec_path: Path, pipeline: str) -> Path:
    """The pipeline spec a model release spec names (relative to the release spec's folder)."""
    path = Path(pipeline)
    return path if path.is_absolute() else spec_path.parent / path


def prepare(spec_path: Path, spec_bytes: bytes, out: Path, progress: bool) -> Prepared:
    """The release's specs, world, track and claim; every input error is raised here."""
    spec = parse_spec(ModelReleaseSpec, spec_path, spec_bytes)
    path = pipeline_path(spec_path, spec.pipeline)
    pipeline_bytes = read_spec_bytes(path)
    world_name = spec_table(path, pipeline_bytes).get("world")
    require(
        not (
            isinstance(world_name, str)
            and world_name in registry.PROBLEMS
            and not registry.is_image(registry.world(world_name))
        ),
        f"{path}: a model release releases the image pipeline's CNN; the text track's model is not released here",
    )
    pipe = resolved(parse_spec(PipelineSpec, path, pipeline_bytes))
    require(
        spec.method in pipe.methods, f"method {spec.method!r} is not one the pipeline runs ({', '.join(pipe.methods)})"
    )
    require(
        spec.method != "nonprivate_mixmin",
        "method nonprivate_mixmin fits λ on the sensitive data without privacy: its model cannot be released",
    )
    require(
        spec.epsilon in pipe.epsilons, f"epsilon {spec.epsilon:g} is not one of the pipeline's {list(pipe.epsilons)}"
    )
    require(
        len(pipe.finetune_grid) == 1,
        "a model release fixes its finetune before it runs: give the pipeline one finetune_epochs and one "
        "finetune_learning_rate (a grid is chosen by rehearsal after λ, too late for the claim)",
    )
    world = build_world(pipe)
    cache = StageCache(
        user_cache_dir() / "model-releases" / sha256_bytes(pipeline_bytes)[:16], registry.content(pipe.world)
    )
    track = image_track(pipe, world, cache, progress, secure=True)
    require(spec.task in track.tasks, f"task {spec.task!r} is not one the pipeline runs ({', '.join(track.tasks)})")
    sequential = pipe.composition == "sequential"
    mixture = mixing_phase(spec.method, mix_epsilon(pipe, spec.epsilon), pipe)
    learning_rate, epochs = pipe.finetune_grid[0]
    batches = track.batches()
    prior = (mixture,) if sequential and mixture is not None else ()
    sigma = cnn.finetune_sigma(spec.epsilon, pipe.delta, batches, epochs, prior)
    finetune = accounting.GaussianPhase(sigma, 1 / batches, epochs * batches)
    accountant = _finetune_accountant(sequential, mixture)
    claim = ModelClaim(
        epsilon=0.0,
        delta=pipe.delta,
        composition=pipe.composition,
        method=spec.method,
        mixture_phase=mixture,
        mixture_epsilon=0.0 if mixture is None else accounting.epsilon([mixture], pipe.delta),
        finetune_phase=finetune,
        finetune_epsilon=accounting.epsilon([finetune], pipe.delta, accountant),
        finetune_accountant=accountant,
        clip=pipe.finetune_clip,
        batch=pipe.finetune_batch,
        learning_rate=float(learning_rate),
        epochs=int(epochs),
    )
    claim = replace(claim, epsilon=composed_epsilon(claim))
    require_memory(spec.canaries * BYTES_PER_CANARY_STEP * finetune.steps, f"{spec.canaries} canaries")
    data = sha256_bytes(
        b"images\0" + np.ascontiguousarray(world.train_images).tobytes() + b"labels\0" + world.train_labels.tobytes()
    )
    inputs = {
        "pipeline": public_path(path, out),
        "pipeline_sha256": sha256_bytes(pipeline_bytes),
        "spec": public_path(spec_path, out),
        "spec_sha256": sha256_bytes(spec_bytes),
        "data_sha256": data,
        "package_version": __version__,
        **_versions(),
    }
    return Prepared(spec, pipe, track, cache, Job(spec.method, spec.epsilon, 0, spec.task), claim, inputs)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {f"{name}_version": version(name) for name in ("torch", "opacus", "dp-accounting")}


def release_model(
    spec_path: Path,
    spec_bytes: bytes,
    out: Path,
    ledger_path: Path | None,
    noise_multiplier: float | None,
    progress: bool,
) -> ModelManifest:
    """Reserve, verify, train once with canaries, audit that run, publish (the module's order)."""
    ready = prepare(spec_path, spec_bytes, out, progress)
    spec, claim = ready.spec, ready.claim
    require(
        noise_multiplier is None or (math.isfinite(noise_multiplier) and noise_multiplier > 0),
        f"noise multiplier must be finite and > 0, got {noise_multiplier}",
    )
    path = ledger_path or (Path(spec.ledger) if spec.ledger else ledger.default_path())
    reservation = gate.reserve(
        path,
        data_sha256=ready.inputs["data_sha256"],
        problem_sha256=ready.inputs["pipeline_sha256"],
        epsilon=claim.epsilon,
        delta=claim.delta,
        phase=claim.finetune_phase,
        before=(claim.mixture_phase,) if claim.mixture_phase else (),
        user_level=False,
        timestamp=now(),
        budget=spec.budget_epsilon,
    )
    try:
        spent, cap, delta = ledger.standing(path, ready.inputs["data_sha256"], ready.inputs["pipeline_sha256"])
        manifest = _trained_and_audited(ready, out, noise_multiplier, progress, Budget(spent, cap, delta))
    except BaseException as exc:
        (out / MODEL_FILE).unlink(missing_ok=True)  # weights go out with their manifest, or not at all
        if isinstance(exc, (Refused, InputError)):
            ledger.withdraw(path, reservation)  # refused: nothing published, nothing spent
        raise  # a crash leaves the reservation counted (the finetune may have run)
    # Only now is the model published; a crash before the commit leaves the reservation counted.
    write_json(out / "release.json", manifest.to_dict())
    ledger.commit(path, reservation, manifest.digest)
    return manifest


def _trained_and_audited(
    ready: Prepared, out: Path, noise_multiplier: float | None, progress: bool, budget: Budget
) -> ModelManifest:
    spec, claim, track, job = ready.spec, ready.claim, ready.track, ready.job
    verification = verify(gate.VERIFY_LEVEL, progress=progress, parts=MODEL_PARTS)
    if verification.failures():
        raise Refused("verify", "verify-accountant failed: " + "; ".join(verification.failures()))
    choice = track.mixture(job)
    mixture = Mixture(None, None) if choice is None else choice.compute()  # its noise: the OS CSPRNG
    pretraining = track.pretrain(job, mixture)
    start = None if pretraining is None else ready.cache.arrays("pretrain", pretraining)
    attached: list[Canaries] = []

    def with_canaries(private: Any) -> None:
        attached.append(attach(private.optimizer, spec.canaries, sample_rate=private.sample_rate))
        if noise_multiplier is not None:  # a test of the gate: the run adds other noise than it claims
            private.optimizer.noise_multiplier = noise_multiplier

    prior = (claim.mixture_phase,) if claim.composition == "sequential" and claim.mixture_phase else ()
    choice_ft = {"learning_rate": claim.learning_rate, "epochs": claim.epochs}
    tuned = track.dp_finetune(job, start, choice_ft, prior, with_canaries)
    canaries = attached[0]
    canaries.detach()
    result = canaries.audit(
        epsilon=claim.finetune_epsilon,
        delta=claim.delta,
        phases=[claim.finetune_phase],
        confidence=spec.confidence,
        accountant=claim.finetune_accountant,
    )
    if result.violation:
        raise Refused("audit", f"the one-run audit of this very finetune found: {one_run_line(result)}")
    weights = tuned.weights()
    write_npz(out / MODEL_FILE, **weights)
    world = track.world
    manifest = ModelManifest(
        model={
            "file": MODEL_FILE,
            "sha256": sha256_bytes((out / MODEL_FILE).read_bytes()),
            "architecture": "SmallCNN" if track.image_spec.network == DEFAULT_NETWORK else track.image_spec.network,
            "network": track.image_spec.network,  # the registered name: load_model(file, network)
            "task": job.task,
            "classes": int(weights["head.bias"].shape[0]),
            "parameters": int(sum(v.size for v in weights.values())),
        },
        metrics=tuned.scored(world.test_images, world.test_labels, job.task)["metrics"],
        claim=claim,
        mixture={
            "method": job.method,
            "sources": [s.name for s in world.sources],
            "weights": None if mixture.weights is None else [float(w) for w in mixture.weights],
        },
        audit={
            **result.to_dict(),
            "noise_multiplier": float(canaries.optimizer.noise_multiplier),
            "sample_rate": claim.finetune_phase.sample_rate,
            "steps": claim.finetune_phase.steps,
            "steps_run": len(canaries.released),
            "membership": "OS CSPRNG",
        },
        verification=gate.verification_record(verification),
        budget=budget,
        inputs=ready.inputs,
        timestamp=now(),
    )
    write_model_card(manifest.to_dict(), out)
    return manifest
