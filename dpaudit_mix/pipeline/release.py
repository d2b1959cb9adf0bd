"""The model release kind (`dpaudit-mix release MODEL.toml`): the image pipeline's finetuned
model, released through the gate's one protocol (:mod:`..release.gate`), which reserves,
verifies, signs, checks, commits or withdraws; this module supplies the rest.

read both specs once and hash those bytes → the claim, fixed before anything runs: the
mixture's phase on split A and the finetune's (σ by the pipeline's own calibration; a smaller σ
is refused), composed as the pipeline composes them (parallel or sequential), the finetune's
accountant checked against PLD → reserve the budget on the ledger, keyed by the sensitive data's
identity (one entry with λ releases on the same data), each phase charged to the part of the data
it ran on (parallel: split A and split B of one partition; sequential: all of it) →
verify-accountant → λ and the pretraining → the DP finetune **once**, its noise and batches from
the OS CSPRNG, with m Dirac canaries on its optimizer (membership and sampling from the CSPRNG
too) → the one-run audit of that very run against the finetune's phase → ``model.npz`` (the
model's weights, no canary coordinate) and the card → the manifest, signed, through every check
of check-release → only then release.json, and the reservation committed. A refusal withdraws
the reservation and publishes no weights. Registered as the kind ``model``, loaded through the
entry point ``dpaudit_mix.release_kinds`` the first time a spec names a pipeline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import accounting
from ..audit.one_run.audit import MIN_CANARIES
from ..audit.one_run.gradient_canaries import BYTES_PER_CANARY_STEP, Canaries, attach
from ..audit.plan import check_detect
from ..base.atomic import write_npz
from ..base.cache import sha256_bytes, user_cache_dir
from ..base.errors import require
from ..base.identity import ALL, Partition, example_digests
from ..base.reporting import progress_steps
from ..base.resources import require_memory
from ..base.specfile import check_fields, parse_spec, read_spec_bytes, spec_table
from ..base.version import __version__
from ..data import registry
from ..models import DEFAULT_NETWORK, cnn
from ..models.device import resolved
from ..release import kinds, signing
from ..release.accountant_check import check_release_accountant
from ..release.audit_size import AuditSize, audit_size
from ..release.check import MODEL_FILES
from ..release.kinds import now
from ..release.lambda_kind import LAMBDA_PARTS
from ..release.manifest import public_path
from ..release.model_card import write_model_card
from ..release.model_manifest import MODEL_FILE, ModelClaim, ModelManifest, composed_epsilon
from ..release.refused import Refused
from ..release.spec import check_no_ledger
from ..verification.parts import OPACUS
from .methods import Mixture, mix_epsilon, mixing_phase
from .run import ImageTrack, build_world, image_track
from .spec import PipelineSpec
from .stages import Job, StageCache

#: what a model release runs, so what its verification checks: λ's parts and the finetune's Opacus DP-SGD.
MODEL_PARTS = LAMBDA_PARTS | {OPACUS}


@dataclass(frozen=True)
class ModelReleaseSpec:
    """A model release (``releases/*.toml`` with a ``pipeline`` key); unknown keys are rejected."""

    pipeline: str = ""  # an image pipeline spec; a relative path is relative to this spec's folder
    method: str = "dpmixmin"  # one of the pipeline's methods: how λ is chosen
    epsilon: float = 1.0  # one of the pipeline's epsilons: the released model's total ε
    task: str = "multiclass"  # the pipeline's task (digit-d under the per-task protocol)
    # the one-run audit: the leak it must catch (σ/detect with 90 %), and its Dirac canaries riding
    # on the finetune (default: the fewest that catch it, planned; a given number that does not is refused)
    detect: float = 2.0
    canaries: int | None = None
    confidence: float = 0.95
    budget_epsilon: float | None = None  # the data's cap, fixed in the ledger by its first release
    ledger: str = ""  # refused: the budget lives where the machine or team keeps it, not where a spec points

    def __post_init__(self) -> None:
        check_fields(self)
        check_no_ledger(self.ledger)
        require(bool(self.pipeline), 'a model release names its pipeline spec: pipeline = "pipeline/....toml"')
        accounting.check_epsilon(self.epsilon)
        check_detect(self.detect)
        require(
            self.canaries is None or self.canaries >= MIN_CANARIES,
            f"canaries must be >= {MIN_CANARIES}, got {self.canaries}",
        )
        require(0 < self.confidence < 1, f"confidence must be in (0, 1), got {self.confidence}")
        require(
            self.budget_epsilon is None or self.budget_epsilon >= self.epsilon,
            f"budget_epsilon must be at least this release's epsilon {self.epsilon:g}, got {self.budget_epsilon}",
        )


def _finetune_accountant(sequential: bool, mixture: accounting.GaussianPhase | None) -> str:
    return accounting.DEFAULT_ACCOUNTANT if sequential and mixture is not None else "prv"


@dataclass(frozen=True)
class PreparedModel:
    """Everything fixed before the first private step: the specs, the track, the job, the claim."""

    spec: ModelReleaseSpec
    pipeline: PipelineSpec
    track: ImageTrack  # secure: every private draw from the OS CSPRNG
    cache: StageCache  # the public stages (proxies, pretraining)
    job: Job
    claim: ModelClaim
    inputs: dict[str, str]
    data: dict[str, str]  # the ledger's key of the sensitive data and what it hashes
    aliases: tuple[str, ...]  # the key the ledger's earlier layout gave this model's data
    parts: tuple[str, ...]  # the part of the data each of the claim's phases runs on


def pipeline_path(spec_path: Path, pipeline: str) -> Path:
    """The pipeline spec a model release spec names (relative to the release spec's folder)."""
    path = Path(pipeline)
    return path if path.is_absolute() else spec_path.parent / path


def prepare(spec_path: Path, spec_bytes: bytes, out: Path, progress: bool) -> PreparedModel:
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
    cut = sha256_bytes(  # the key of the ledger's earlier layout: the cut images and labels
        b"images\0" + np.ascontiguousarray(world.train_images).tobytes() + b"labels\0" + world.train_labels.tobytes()
    )
    identity = registry.sensitive_identity(pipe.world, pipe.seed)
    data = {"sha256": identity or cut, "identity": "sensitive" if identity else "rows"}
    inputs = {
        "pipeline": public_path(path, out),
        "pipeline_sha256": sha256_bytes(pipeline_bytes),
        "spec": public_path(spec_path, out),
        "spec_sha256": sha256_bytes(spec_bytes),
        "data_sha256": cut,
        "package_version": __version__,
        **_versions(),
    }
    job = Job(spec.method, spec.epsilon, 0, spec.task)
    aliases = () if data["sha256"] == cut else (cut,)
    return PreparedModel(spec, pipe, track, cache, job, claim, inputs, data, aliases, _parts(world, claim))


def _parts(world: Any, claim: ModelClaim) -> tuple[str, ...]:
    """Where each phase of the claim runs: parallel, the mixture on split A and the finetune on
    split B (one partition of the sensitive data, named by its examples); sequential, all of it."""
    phases = 1 + (claim.mixture_phase is not None)
    if claim.composition == "sequential":
        return (ALL,) * phases
    partition = Partition.of(
        example_digests(world.train_images, world.train_labels), {"A": world.split_a, "B": world.split_b}
    )
    return (partition.part("A"), partition.part("B"))[-phases:]


def _with_sigma(claim: ModelClaim, sigma: float) -> ModelClaim:
    """The claim of a finetune run at ``sigma`` (no smaller than the calibrated one)."""
    finetune = replace(claim.finetune_phase, noise_multiplier=sigma)
    spent = accounting.epsilon([finetune], claim.delta, claim.finetune_accountant)
    changed = replace(claim, finetune_phase=finetune, finetune_epsilon=spent)
    return replace(changed, epsilon=composed_epsilon(changed))


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {f"{name}_version": version(name) for name in ("torch", "opacus", "dp-accounting")}


def _written_model(weights: dict[str, np.ndarray], out: Path, network: str, task: str) -> dict[str, Any]:
    """``model.npz`` written (no pickle), and the manifest's model section that names it."""
    write_npz(out / MODEL_FILE, **weights)
    return {
        "file": MODEL_FILE,
        "sha256": sha256_bytes((out / MODEL_FILE).read_bytes()),
        "architecture": "SmallCNN" if network == DEFAULT_NETWORK else network,
        "network": network,  # the registered name: load_model(file, network)
        "task": task,
        "classes": int(weights["head.bias"].shape[0]),
        "parameters": int(sum(v.size for v in weights.values())),
    }


def _baselines(track: ImageTrack, job: Job, start: dict[str, np.ndarray] | None) -> dict[str, dict[str, float]]:
    """The released model's test metrics are read beside what costs no more privacy than the
    release already spent: the λ-pretrained CNN before its DP finetune (public images drawn by the
    released λ: post-processing) and chance. The pipeline's other methods are DP finetunes of the
    same data that this ledger never charged: publishing their metrics here would release them
    unaccounted, so the card leaves them to the pipeline's own (unpublished) report."""
    world, task = track.world, job.task
    found = {"chance": cnn.chance_metrics(world.test_labels, task)}
    if start is not None:
        pretrained = cnn.from_arrays(start, track.finetune_key(job), task, track.network)
        found = {
            "pretrained_only": cnn.held_out_metrics(pretrained, world.test_images, world.test_labels, task),
            **found,
        }
    return found


#: the model release's stages, in order (a progress bar names the one running).
MODEL_STEPS = ("verify", "private mixture", "pretrain", "DP finetune with canaries", "one-run audit")


def _trained_and_audited(
    ready: PreparedModel, work: kinds.Work, sized: AuditSize, *, accountant_check: dict[str, Any]
) -> ModelManifest:
    spec, claim, track, job = ready.spec, ready.claim, ready.track, ready.job
    out, progress = work.out, work.progress
    sigma = claim.finetune_phase.noise_multiplier
    with progress_steps(len(MODEL_STEPS), "model release", show=progress) as step:
        step(MODEL_STEPS[0])
        verification = work.verified()
        step(MODEL_STEPS[1])
        choice = track.mixture(job)
        mixture = Mixture(None, None) if choice is None else choice.compute()  # its noise: the OS CSPRNG
        step(MODEL_STEPS[2])
        pretraining = track.pretrain(job, mixture)
        start = None if pretraining is None else ready.cache.arrays("pretrain", pretraining)
        attached: list[Canaries] = []

        def with_canaries(private: Any) -> None:
            attached.append(
                attach(
                    private.optimizer, sized.size, accountant=private.engine.accountant, sample_rate=private.sample_rate
                )
            )
            private.optimizer.noise_multiplier = sigma  # the calibrated σ, or the larger one asked for

        prior = (claim.mixture_phase,) if claim.composition == "sequential" and claim.mixture_phase else ()
        choice_ft = {"learning_rate": claim.learning_rate, "epochs": claim.epochs}
        step(MODEL_STEPS[3])
        started = time.perf_counter()
        tuned = track.dp_finetune(job, start, choice_ft, prior, with_canaries)
        trained = time.perf_counter()
        step(MODEL_STEPS[4])
        canaries = attached[0]
        canaries.detach()
        result = canaries.audit(claim=claim.finetune_claim, confidence=spec.confidence)
        result.to_dict()  # its power, computed now: the audit's cost counts it
        audited = time.perf_counter()
        if result.violation:
            raise Refused("audit", f"the one-run audit of this very finetune found: {result.verdict_line()}")
    world = track.world
    manifest = ModelManifest(
        model=_written_model(tuned.weights(), out, track.image_spec.network, job.task),
        metrics=tuned.scored(world.test_images, world.test_labels, job.task)["metrics"],
        baselines=_baselines(track, job, start),
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
            **sized.record(),
            # what the audit cost beside the finetune it rode on (the canaries' steps are in the finetune's)
            "seconds": {"finetune": round(trained - started, 3), "audit": round(audited - trained, 3)},
        },
        verification={**kinds.verification_record(verification), "accountant_check": accountant_check},
        budget=work.budget,
        inputs=ready.inputs,
        timestamp=now(),
        publication=work.publication,
    )
    write_model_card(manifest.to_dict(), out, signing.signer())
    return manifest


class ModelKind:
    """A model: a release spec that names a pipeline (:class:`ModelReleaseSpec`)."""

    files: tuple[str, ...] = MODEL_FILES
    parts: frozenset[str] = MODEL_PARTS

    def prepare(self, asked: kinds.Asked) -> kinds.Prepared:
        """The claim, its accountant checked, and the canaries this finetune carries, held to the
        spec's detect before anything is spent (its data's identity is its world's, computed
        here: ``trusted`` has nothing to vouch for)."""
        ready = prepare(asked.spec_path, asked.spec_bytes, asked.out, asked.progress)
        spec = ready.spec
        calibrated = ready.claim.finetune_phase.noise_multiplier
        sigma = kinds.released_sigma(calibrated, asked.noise_multiplier)
        claim = ready.claim if sigma == calibrated else _with_sigma(ready.claim, sigma)
        ready = replace(ready, claim=claim)
        checked_accountant = check_release_accountant(
            claim.finetune_accountant, claim.finetune_epsilon, claim.delta, [claim.finetune_phase]
        )
        sized = audit_size(
            claim.finetune_claim,
            detect=spec.detect,
            size=spec.canaries,
            one_run=True,
            confidence=spec.confidence,
            minimum=MIN_CANARIES,
        )
        steps = claim.finetune_phase.steps
        require_memory(sized.size * BYTES_PER_CANARY_STEP * steps, f"{sized.size} canaries over {steps} steps")
        charge = kinds.Charge(
            data_sha256=ready.data["sha256"],
            problem_sha256=ready.inputs["pipeline_sha256"],
            epsilon=claim.epsilon,
            delta=claim.delta,
            phase=claim.finetune_phase,
            user_level=False,
            budget=spec.budget_epsilon,
            kind="model",
            identity=ready.data["identity"],
            aliases=ready.aliases,
            before=(claim.mixture_phase,) if claim.mixture_phase else (),
            parts=ready.parts,
        )
        return kinds.Prepared(charge, ready.data, None, (ready, sized, checked_accountant))

    def work(self, prepared: kinds.Prepared, work: kinds.Work) -> ModelManifest:
        """Verify, train once with canaries, audit that run: the manifest (the module's order)."""
        ready, sized, checked_accountant = prepared.state
        return _trained_and_audited(ready, work, sized, accountant_check=checked_accountant)


MODEL_KIND = kinds.register_release_kind("model", ModelKind())
