"""The DP-SGD mechanisms audited from one training run (``one_run = true``): m Dirac canaries
ride on a single run, each in with probability ½ (Steinke, Nasr & Jagielski 2023).

- ``opacus``: the image pipeline's real finetune, the SmallCNN through Opacus
  (:func:`...models.opacus_sgd.make_private` and :func:`~...models.opacus_sgd.train`, the code a
  pipeline finetune runs), on D's images, with :func:`...canaries.attach` on its DPOptimizer.
- ``user-dpsgd``: the text track's user-level step (:func:`...models.userdp.sampled_gradients`
  and :func:`~...models.userdp.noisy_mean`) on the bigram probe of :mod:`.dpsgd`, with m canary
  users: each one's summed gradient is a Dirac of pull ``CANARY_PULL`` · C on a coordinate of its
  own, clipped by the step's own clipping to C, noised by its own noise (the noisy mean is taken
  over the model's and the canaries' coordinates at once), divided by its public qU.

Both score each canary white-box (the per-step likelihood ratio, :mod:`..dirac`) and black-box
(the canary coordinate after plain SGD on what was released). A canary never changes the real
examples' gradients, clipping or divisor, so the m canaries do not interfere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from ... import accounting
from ...base.alphabet import V
from ...base.errors import require
from ...base.randomness import Key, RandomSource
from ...base.resources import require_memory
from ...data import registry
from ...models import cnn, opacus_sgd, userdp
from ...problem import Problem
from ..dirac import dirac_scores
from ..one_run.gradient_canaries import attach
from ..spec import AuditSpec, mixing_rows
from .base import CanaryCollector, RunPlan, Setting
from .dpsgd import CANARY_PULL, OpacusSteps, UserProbe, _dirac_info, isolated_canary, user_windows


def _key(seed: int, mechanism: str, setting: Setting) -> Key:
    """The run's streams: its batches, noise, initial weights and canary sampling."""
    return Key(seed).child(mechanism=mechanism, audit=setting.name, one_run=True)


# --- the image finetune (Opacus, SmallCNN) ---------------------------------------------------


@dataclass(frozen=True)
class OpacusCanaryRun(OpacusSteps):
    images: np.ndarray
    labels: np.ndarray
    task: str
    batch: int
    epochs: int
    sigma: float
    clip: float
    learning_rate: float
    seed: int

    @property
    def examples(self) -> int:
        return len(self.labels)

    def __call__(self, setting: Setting, membership: np.ndarray) -> dict[str, np.ndarray]:
        key = _key(self.seed, "opacus", setting)
        data = cnn.tensors(self.images, self.labels)
        private = self.make_private(cnn.from_arrays(None, key, self.task), self.sigma if setting.noise else 0.0)
        canaries = attach(
            private.optimizer,
            len(membership),
            accountant=private.engine.accountant,
            sample_rate=private.sample_rate,
            membership=membership,
            source=key.stream("canary-sampling").numpy(),
        )
        opacus_sgd.train(private, data, self.epochs, cnn.cross_entropy, key, sampler=self.sampler)
        canaries.detach()
        return {"white_box": canaries.scores(), "black_box": canaries.final_scores()}


def _image_data(spec: AuditSpec, full: Problem) -> tuple[np.ndarray, np.ndarray]:
    """D's images and task labels: the problem's rows are the world's sensitive training images."""
    require(
        spec.problem in registry.PROBLEMS and registry.is_image(registry.world(spec.problem)),
        f"a one-run opacus audit finetunes the SmallCNN on an embedded image world's images "
        f"({', '.join(registry.image_worlds())}), got problem {spec.problem!r}",
    )
    _, sensitive = registry.world_sources(spec.problem, int(full.meta.get("seed", 0)))
    require(len(sensitive.train_labels) == full.n, "the problem's rows are not the world's sensitive images")
    rows = mixing_rows(full.n, spec)
    labels = sensitive.train_labels[rows]
    return sensitive.train_images[rows], labels if spec.task == "multiclass" else cnn.task_labels(labels, spec.task)


@dataclass(frozen=True)
class OpacusOneRun:
    """The image finetune's DP-SGD at q = 1 / batches for whole epochs, σ from Opacus' own
    calibration, audited in one run of the SmallCNN on D's images (``run`` trains it: a subclass
    audits a variant)."""

    run: type[OpacusCanaryRun] = OpacusCanaryRun

    def one_run(
        self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None
    ) -> RunPlan[CanaryCollector]:
        images, labels = _image_data(spec, full)
        batches = round(1 / spec.sample_rate)
        batch = -(-len(labels) // batches)
        require(
            cnn.batches_per_epoch(len(labels), batch) == batches,
            f"mechanism opacus: D's {len(labels)} images cannot be cut into {batches} batches",
        )
        epochs = spec.steps // batches
        require_memory(
            spec.one_run_canaries * 8 * spec.steps, f"{spec.one_run_canaries} canaries over {spec.steps} steps"
        )
        calibrated = cnn.finetune_sigma(spec.epsilon, spec.delta, batches, epochs)
        sigma = calibrated if noise_multiplier is None else noise_multiplier
        run = self.run(images, labels, spec.task, batch, epochs, sigma, spec.clip, spec.learning_rate, spec.seed)
        return RunPlan(
            collect=run,
            claimed_phases=(accounting.GaussianPhase(calibrated, spec.sample_rate, spec.steps),),
            noise_multiplier=sigma,
            problem={
                "name": spec.problem,
                "task": full.task,
                "examples": len(labels),
                "batch": batch,
                "epochs": epochs,
                "model": "SmallCNN",
            },
            canaries={"max_clip": {"norm": spec.clip, "kind": "dirac", "canaries": spec.one_run_canaries}},
            processes=False,
            accountant="prv",  # Opacus' own calibration
        )


# --- user-level DP-SGD (the text track's step) -----------------------------------------------


@dataclass(frozen=True)
class UserCanaryRun:
    users: tuple[np.ndarray, ...]
    config: userdp.UserLevelSGD
    seed: int

    def __call__(self, setting: Setting, membership: np.ndarray) -> dict[str, np.ndarray]:
        key = _key(self.seed, "user-dpsgd", setting)
        config = self.config if setting.noise else replace(self.config, noise_multiplier=0.0)
        probe = UserProbe(CANARY_PULL * config.clip)
        size = sum(p.numel() for p in probe.parameters())
        member = np.asarray(membership, dtype=bool)
        draws = key.stream("canary-sampling").numpy()
        released: list[np.ndarray] = []

        def step(
            model: nn.Module,
            data: list[torch.Tensor],
            step_config: userdp.UserLevelSGD,
            batches: RandomSource,
            noise: RandomSource,
        ) -> torch.Tensor:
            """The step on the model's P coordinates and the m canary users' coordinates: the real
            users' rows carry 0 on the canaries' (no interference); each sampled member canary's
            row is a Dirac, clipped by the step's own clipping (a Dirac row's norm is its one
            value, so it is clipped in that compact form); one noisy mean over all P + m."""
            real = userdp.sampled_gradients(model, data, step_config, batches)
            users = userdp.divisor_users(step_config, data)
            update = userdp.noisy_mean(torch.nn.functional.pad(real, (0, len(member))), step_config, users, noise)
            sampled = torch.from_numpy(member & (draws.random(len(member)) < step_config.sample_rate))
            pulls = torch.where(sampled, CANARY_PULL * step_config.clip, 0.0).to(update.dtype)[:, None]
            update[size:] += userdp.clip_rows(pulls, step_config.clip)[:, 0] / (step_config.sample_rate * users)
            released.append(update[size:].double().numpy() * step_config.sample_rate * users / step_config.clip)
            return update[:size]

        userdp.train(probe, list(self.users), config, key, step=step)
        values = np.stack(released, axis=1)
        return {
            "white_box": dirac_scores(values, config.noise_multiplier, config.sample_rate),
            "black_box": values.sum(axis=1),
        }


@dataclass(frozen=True)
class UserOneRun:
    """The text track's user-level DP-SGD, σ from our accountant, audited in one run on D's users
    with m canary users."""

    def one_run(
        self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None
    ) -> RunPlan[CanaryCollector]:
        require(data.users is not None, f"mechanism user-dpsgd needs a problem with users; {spec.problem} has none")
        users = user_windows(data)
        isolated_canary(users)
        m = spec.one_run_canaries
        require_memory(8 * (len(users) + 2) * (V * V + 1 + m) + 8 * m * spec.steps, f"{m} canary users")
        calibrated = accounting.calibrate(spec.epsilon, spec.delta, spec.sample_rate, spec.steps)
        sigma = calibrated if noise_multiplier is None else noise_multiplier
        config = userdp.UserLevelSGD(
            spec.sample_rate, spec.steps, sigma, spec.clip, spec.learning_rate, users=len(users)
        )
        return RunPlan(
            collect=UserCanaryRun(tuple(users), config, spec.seed),
            claimed_phases=(accounting.GaussianPhase(calibrated, spec.sample_rate, spec.steps),),
            noise_multiplier=sigma,
            problem={"name": spec.problem, "task": full.task, "examples": data.n, "users": len(users)},
            canaries={"max_clip": {**_dirac_info(spec.clip), "canaries": m}},
            processes=False,
        )
