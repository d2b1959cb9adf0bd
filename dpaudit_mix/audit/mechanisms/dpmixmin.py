"""DP-MixMin's learner as an audited mechanism: one batched fit per chunk of runs yields the
released λ (black-box scores, :func:`..canaries.black_box_scores`) and every step's noisy
gradient (white-box scores, from the learner itself). ``privatiser`` is the learner's DP step:
the shipped one, or a variant audited in its place (verify-accountant's learner mutants)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ... import accounting
from ...base.errors import present
from ...base.randomness import Stream, stream
from ...learner import Canary, LearnerConfig, Privatiser, fit
from ...problem import Problem
from ..mixmin_canaries import black_box_scores, max_clip_canary, natural_canary, natural_canary_index
from ..spec import AuditSpec
from .base import Collector, RunPlan, Setting


@dataclass(frozen=True)
class MixMinCollector:
    data: Problem
    config: LearnerConfig  # σ of the noisy settings; a control runs it at σ = 0
    canaries: dict[str, Canary]
    seed: int
    privatiser: Privatiser | None = None  # None: the learner's shipped DP step

    def noise(self, setting: Setting) -> Stream:
        return stream(self.seed, "learner-noise", audit=setting.name)

    def __call__(self, setting: Setting, runs: np.ndarray, include: np.ndarray) -> dict[str, np.ndarray]:
        config = self.config if setting.noise else replace(self.config, noise_multiplier=0.0)
        canary = self.canaries[setting.canary]
        result = fit(
            self.data,
            config,
            runs,
            self.noise(setting),
            canary=canary,
            include=include,
            threads=1,
            privatiser=self.privatiser,
        )
        return {
            "black_box": black_box_scores(canary, result.weights),
            "white_box": present(result.whitebox_scores, "a canary fit returned no white-box scores"),
        }


@dataclass(frozen=True)
class DPMixMin:
    """The mixing learner on D with a natural (held-out) and/or a max-clip canary."""

    privatiser: Privatiser | None = None

    def plan(self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None) -> RunPlan[Collector]:
        calibrated = accounting.calibrate(spec.epsilon, spec.delta, spec.sample_rate, spec.steps)
        sigma = calibrated if noise_multiplier is None else noise_multiplier
        canaries: dict[str, Canary] = {}
        info: dict[str, Any] = {}
        if "natural" in spec.canaries:
            # At user level the canary is a held-out user, all of their rows; a problem without held-out
            # user ids (image worlds) has one-example users, so a held-out example is a whole user.
            by_user = spec.user_level and full.heldout_users is not None
            index = natural_canary_index(
                full, spec.natural_policy, clip=spec.clip, index=spec.natural_index, seed=spec.seed, user_level=by_user
            )
            canaries["natural"] = natural_canary(full, index, by_user)
            info["natural"] = {
                "policy": spec.natural_policy,
                "heldout_index": index,
                "examples": len(np.atleast_2d(present(canaries["natural"].logp, "a natural canary has rows"))),
            }
        if "max_clip" in spec.canaries:
            canaries["max_clip"] = max_clip_canary(full.k, spec.clip)
            direction = present(canaries["max_clip"].gradient, "a max-clip canary has a direction")
            info["max_clip"] = {"norm": spec.clip, "direction": direction.tolist()}
        config = spec.learner(sigma)
        return RunPlan(
            collect=MixMinCollector(data, config, canaries, spec.seed, self.privatiser),
            claimed_phases=(accounting.GaussianPhase(calibrated, spec.sample_rate, spec.steps),),
            noise_multiplier=sigma,
            problem={"name": spec.problem, "task": full.task, "n_mixing": data.n, "k": data.k},
            canaries=info,
            processes=False,
        )
