"""The pipeline's two DP-SGD mechanisms, audited as they run: the image finetune's Opacus
DP-SGD (:mod:`...models.opacus_sgd`) and the text track's user-level DP-SGD
(:mod:`...models.userdp`), each on a probe model small enough for tens of thousands of runs.

The canary (Nasr et al. 2023) is an example (a user) whose clipped gradient is a Dirac of norm C
in a coordinate w no other example touches: a bias-free weight that only the canary's loss
reaches, pulled at CANARY_PULL · C so that clipping leaves exactly C. Its white-box score is the
per-step likelihood ratio of :mod:`..dirac`; the black-box score is w after the last step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from ... import accounting
from ...base.alphabet import V
from ...base.errors import present, require
from ...base.randomness import Key, RandomSource
from ...models import cnn, opacus_sgd, userdp
from ...problem import Problem
from ..dirac import dirac_scores
from ..spec import AuditSpec
from .base import Collector, RunPlan, Setting

#: the canary's raw gradient on w is CANARY_PULL · C: clipping scales it to exactly C.
CANARY_PULL = 4.0


def dirac_score(released: np.ndarray, sigma: float, sample_rate: float) -> float:
    """The white-box score of one run from its per-step released values (:func:`..dirac.dirac_scores`)."""
    return float(dirac_scores(released[None, :], sigma, sample_rate)[0])


def _run_key(seed: int, mechanism: str, setting: Setting, run: int) -> Key:
    """Run r's streams ("finetune-batches", "finetune-noise"), its own in every mechanism and setting."""
    return Key(seed).child(mechanism=mechanism, audit=setting.name, run=int(run))


def _scores(
    runs: np.ndarray, include: np.ndarray, one: Callable[[int, bool], tuple[float, float]]
) -> dict[str, np.ndarray]:
    """Each run's (black-box, white-box) score from ``one(run, canary_in)``."""
    torch.set_num_threads(1)  # runs are tiny and chunks run side by side
    pairs = np.array([one(int(r), bool(i)) for r, i in zip(runs, include, strict=True)]).reshape(len(runs), 2)
    return {"black_box": pairs[:, 0], "white_box": pairs[:, 1]}


# --- Opacus DP-SGD --------------------------------------------------------------------------


class OpacusProbe(nn.Module):
    """A linear classifier on D's features plus the canary weight w on a feature s that only the
    canary has (s = 1; 0 for every example of D, whose features it zeroes). Every weight starts
    at 0: the loss is convex, and a run's randomness is then its batches and noise alone."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.body = nn.Linear(features, 2)
        self.canary = nn.Linear(1, 1, bias=False)
        for weight in self.parameters():
            nn.init.zeros_(weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.body(x[:, :-1]), self.canary(x[:, -1:])], dim=1)

    @property
    def w(self) -> torch.Tensor:
        return self.canary.weight


def _probe_loss(pull: float) -> opacus_sgd.Loss:
    def loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out, s = module(x), x[:, -1]
        ordinary = nn.functional.cross_entropy(out[:, :2], y, reduction="none")
        return torch.mean((1 - s) * ordinary - pull * s * out[:, 2])

    return loss


def opacus_dataset(data: Problem) -> TensorDataset:
    """D's examples as the probe sees them: standardised log-likelihood rows, label "a source of
    the first half fits best", and s = 0."""
    logp = data.logp - data.logp.mean(axis=0)
    features = logp / np.maximum(logp.std(axis=0), 1e-12)
    labels = (np.argmax(data.logp, axis=1) < data.k // 2).astype(np.int64)
    inputs = np.hstack([features, np.zeros((data.n, 1))]).astype(np.float32)
    return TensorDataset(torch.from_numpy(inputs), torch.from_numpy(labels))


class OpacusSteps:
    """How the pipeline's Opacus finetune privatises a model and draws its batches: what both of
    its audits (many runs of the probe, one run of the SmallCNN) run, and what a variant
    overrides. A subclass has ``examples`` (the public n), ``batch``, ``clip`` and ``learning_rate``."""

    batch: int
    clip: float
    learning_rate: float

    @property
    def examples(self) -> int:
        raise NotImplementedError

    def make_private(self, model: nn.Module, sigma: float) -> opacus_sgd.Private:
        """The model made private by the pipeline's own Opacus wrapper (what is audited)."""
        return opacus_sgd.make_private(model, self.examples, self.batch, self.clip, sigma, self.learning_rate)

    def sampler(
        self, data: TensorDataset, sample_rate: float, count: int, draws: RandomSource
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The pipeline's own batches: Poisson at q."""
        return opacus_sgd.poisson_batches(data, sample_rate, count, draws)


@dataclass(frozen=True)
class OpacusCollector(OpacusSteps):
    data: TensorDataset
    batch: int
    epochs: int
    sigma: float
    clip: float
    learning_rate: float
    seed: int

    def _with_canary(self) -> TensorDataset:
        inputs, labels = self.data.tensors
        canary = torch.zeros((1, inputs.shape[1]))
        canary[0, -1] = 1.0
        return TensorDataset(torch.cat([inputs, canary]), torch.cat([labels, torch.zeros(1, dtype=labels.dtype)]))

    @property
    def examples(self) -> int:
        return len(self.data)

    def run(self, setting: Setting, run: int, canary_in: bool) -> tuple[float, float]:
        key = _run_key(self.seed, "opacus", setting, run)
        data = self._with_canary() if canary_in else self.data
        probe = OpacusProbe(data.tensors[0].shape[1] - 1)
        sigma = self.sigma if setting.noise else 0.0
        private = self.make_private(probe, sigma)
        released: list[float] = []

        def observe(stepped: bool) -> None:
            scale = private.optimizer.expected_batch_size / self.clip  # the noisy sum over C
            released.append(-float(present(probe.w.grad, "a step leaves w's gradient")) * scale if stepped else np.nan)

        opacus_sgd.train(
            private,
            data,
            self.epochs,
            _probe_loss(CANARY_PULL * self.clip),
            key,
            after_step=observe,
            sampler=self.sampler,
        )
        return float(probe.w.detach()), dirac_score(np.array(released), sigma, private.sample_rate)

    def __call__(self, setting: Setting, runs: np.ndarray, include: np.ndarray) -> dict[str, np.ndarray]:
        return _scores(runs, include, lambda r, canary_in: self.run(setting, r, canary_in))


@dataclass(frozen=True)
class OpacusMechanism:
    """The image finetune's DP-SGD: Opacus at q = 1 / ⌈n / batch⌉ for whole epochs, σ from Opacus'
    own calibration (:func:`...models.cnn.finetune_sigma`), on D's rows. ``collector`` runs it (a
    subclass audits a variant: verify-accountant's Opacus mutants)."""

    collector: type[OpacusCollector] = OpacusCollector

    def plan(self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None) -> RunPlan[Collector]:
        batches = round(1 / spec.sample_rate)
        batch = -(-data.n // batches)
        require(
            cnn.batches_per_epoch(data.n, batch) == batches,
            f"mechanism opacus: D's {data.n} examples cannot be cut into {batches} batches (q = {spec.sample_rate:g}); "
            "choose rho or sample_rate so that n >= 1/q",
        )
        epochs = spec.steps // batches
        dataset = opacus_dataset(data)
        require(
            bool(torch.all(dataset.tensors[0][:, -1] == 0)),
            "mechanism opacus: an example of D reaches the canary's feature; the canary would not be isolated",
        )
        calibrated = cnn.finetune_sigma(spec.epsilon, spec.delta, batches, epochs)
        sigma = calibrated if noise_multiplier is None else noise_multiplier
        collector = self.collector(dataset, batch, epochs, sigma, spec.clip, spec.learning_rate, spec.seed)
        return RunPlan(
            collect=collector,
            claimed_phases=(accounting.GaussianPhase(calibrated, spec.sample_rate, spec.steps),),
            noise_multiplier=sigma,
            problem={"name": spec.problem, "task": full.task, "examples": data.n, "batch": batch, "epochs": epochs},
            canaries={"max_clip": _dirac_info(spec.clip)},
            processes=True,
            accountant="prv",  # Opacus' own calibration (finetune_sigma)
        )


def _dirac_info(clip: float) -> dict[str, Any]:
    return {"norm": clip, "kind": "dirac", "pull": CANARY_PULL * clip}


# --- user-level DP-SGD ----------------------------------------------------------------------

#: the canary user's code: no window of D holds it (their codes are 0..k < V − 1).
CANARY_CODE = V - 1


class UserProbe(nn.Module):
    """A bigram model (next-code logits from a table) whose canary positions (input CANARY_CODE)
    score w instead. The forward value there is 0 (all codes equally likely) and the gradient
    on w is constant, CANARY_PULL · C · (1 − 1/V) per window before clipping. The table starts
    at 0 (a convex loss; a run's randomness is its sampling and noise alone)."""

    def __init__(self, pull: float) -> None:
        super().__init__()
        self.table = nn.Embedding(V, V)
        nn.init.zeros_(self.table.weight)
        self.w = nn.Parameter(torch.zeros(()))
        self.pull = pull / (1 - 1 / V)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        target = nn.functional.one_hot(torch.tensor(CANARY_CODE), V).to(self.table.weight.dtype)
        canary = self.pull * (self.w - self.w.detach()) * target
        return torch.where((codes == CANARY_CODE)[..., None], canary, self.table(codes))


def _offset(model: nn.Module, weight: torch.Tensor) -> int:
    """Where ``weight`` starts in the model's flattened trainable weights (userdp's update layout)."""
    offset = 0
    for p in model.parameters():
        if p is weight:
            return offset
        offset += p.numel() if p.requires_grad else 0
    raise ValueError("the weight is not the model's")


def user_windows(data: Problem) -> list[np.ndarray]:
    """D's users, each row one window: the start code then its sources ranked by likelihood."""
    users = present(data.users, "user-dpsgd needs user ids")
    codes = np.hstack([np.zeros((data.n, 1), dtype=np.int64), 1 + np.argsort(-data.logp, axis=1)])
    return [codes[users == u] for u in np.unique(users)]


def isolated_canary(users: list[np.ndarray]) -> None:
    """The audit's validity rests on the canary's code being one no user of D holds (its weight w
    is then reached by the canary alone): asserted on the windows themselves, for every k."""
    clash = sum(int(np.any(windows == CANARY_CODE)) for windows in users)
    require(clash == 0, f"mechanism user-dpsgd: {clash} users of D hold the canary's code {CANARY_CODE}")


@dataclass(frozen=True)
class UserCollector:
    users: tuple[np.ndarray, ...]
    config: userdp.UserLevelSGD
    seed: int

    def step(
        self,
        model: nn.Module,
        data: list[torch.Tensor],
        config: userdp.UserLevelSGD,
        batches: RandomSource,
        noise: RandomSource,
    ) -> torch.Tensor:
        """The text track's own user-level DP step (what is audited)."""
        return userdp.released_step(model, data, config, batches, noise)

    def run(self, setting: Setting, run: int, canary_in: bool) -> tuple[float, float]:
        key = _run_key(self.seed, "user-dpsgd", setting, run)
        width = self.users[0].shape[1]
        canary_user = np.full((self.config.windows_per_user, width), CANARY_CODE, dtype=np.int64)
        users = [*self.users, canary_user] if canary_in else list(self.users)
        config = self.config if setting.noise else replace(self.config, noise_multiplier=0.0)
        probe = UserProbe(CANARY_PULL * config.clip)
        released: list[float] = []
        divisor = config.sample_rate * len(self.users) / config.clip  # the noisy sum over C (public U)
        w_index = _offset(probe, probe.w)  # w's place in the flattened update

        def observe(update: torch.Tensor) -> None:
            released.append(-float(update[w_index]) * divisor)

        userdp.train(probe, users, config, key, observe=observe, step=self.step)
        return float(probe.w.detach()), dirac_score(np.array(released), config.noise_multiplier, config.sample_rate)

    def __call__(self, setting: Setting, runs: np.ndarray, include: np.ndarray) -> dict[str, np.ndarray]:
        return _scores(runs, include, lambda r, canary_in: self.run(setting, r, canary_in))


@dataclass(frozen=True)
class UserDPSGDMechanism:
    """The text track's user-level DP-SGD (per-user clipping of the summed gradient, Poisson
    user sampling), σ from our accountant, on D's users with a canary user. ``collector`` runs it
    (a subclass audits a variant)."""

    collector: type[UserCollector] = UserCollector

    def plan(self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None) -> RunPlan[Collector]:
        require(
            data.users is not None,
            f"mechanism user-dpsgd needs a problem with users (e.g. shakespeare-users); {spec.problem} has none",
        )
        require(
            data.k < CANARY_CODE,
            f"mechanism user-dpsgd: the probe codes D's {data.k} sources as 1..{data.k} and the canary as "
            f"{CANARY_CODE}, so it needs k <= {CANARY_CODE - 1} sources (got k = {data.k}): the canary must be a "
            "code no other user's window holds",
        )
        users = user_windows(data)
        isolated_canary(users)
        calibrated = accounting.calibrate(spec.epsilon, spec.delta, spec.sample_rate, spec.steps)
        sigma = calibrated if noise_multiplier is None else noise_multiplier
        config = userdp.UserLevelSGD(
            spec.sample_rate, spec.steps, sigma, spec.clip, spec.learning_rate, users=len(users)
        )
        return RunPlan(
            collect=self.collector(tuple(users), config, spec.seed),
            claimed_phases=(accounting.GaussianPhase(calibrated, spec.sample_rate, spec.steps),),
            noise_multiplier=sigma,
            problem={"name": spec.problem, "task": full.task, "examples": data.n, "users": len(users)},
            canaries={"max_clip": {**_dirac_info(spec.clip), "windows": config.windows_per_user}},
            processes=True,
        )
