"""How each method picks the pretraining mixture λ, and what that costs in privacy.

- ``dpmixmin``: DP-MixMin on split A (full-batch Gaussian phase, σ from our accountant).
- ``uniform``: λ = 1/k, free.
- ``random_search``: M candidates λ_m ~ Dirichlet(1) (public randomness), each scored by its
  mixture loss summed over split A; the M sums are released at once by one Gaussian mechanism
  and the best is kept (post-processing). A per-example loss lies in [0, B], B = −log of the
  smallest smoothed proxy probability (a public constant), so the sums have L2 sensitivity B√M.
- ``no_pretrain``: no λ at all.
- ``warm``: no λ either; pretraining uses the world's clean public in-distribution slice alone
  (the WarmSyn paper's warm-up on public in-distribution data), free.
- ``nonprivate_mixmin``: MixMin on all the private training data, an upper bound that is not
  releasable (it spends no accounted budget because it is not private at all).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from .. import accounting
from ..base.errors import present
from ..base.randomness import source, stream
from ..data.proxies import CLASSES, SMOOTHING
from ..learner import LearnerConfig, fit, learner_config
from ..optimum import mixmin
from ..problem import Problem


class MixingSpec(Protocol):
    """What choosing λ reads from a spec (the image and the text pipeline's alike; read-only)."""

    @property
    def seed(self) -> int: ...
    @property
    def epsilons(self) -> tuple[float, ...]: ...
    @property
    def methods(self) -> tuple[str, ...]: ...
    @property
    def seeds(self) -> int: ...
    @property
    def delta(self) -> float: ...
    @property
    def composition(self) -> str: ...
    @property
    def mix_share(self) -> float: ...
    @property
    def mix_steps(self) -> int: ...
    @property
    def mix_clip(self) -> float: ...
    @property
    def mix_learning_rate(self) -> float: ...
    @property
    def search_candidates(self) -> int: ...
    @property
    def device(self) -> str: ...  # where the track's models compute (it keys their stages off the CPU)


@dataclass(frozen=True)
class Mixture:
    weights: np.ndarray | None  # None: no pretraining on a mixture
    phase: accounting.GaussianPhase | None  # the DP phase run on split A, if any
    releasable: bool = True
    learner: dict[str, float] | None = None  # (C, η) when chosen by rehearsal on public data

    def to_dict(self) -> dict[str, Any]:
        return {
            "weights": None if self.weights is None else self.weights.tolist(),
            "phase": None if self.phase is None else asdict(self.phase),
            "releasable": self.releasable,
            **({} if self.learner is None else {"learner": dict(self.learner)}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Mixture:
        return cls(
            None if data["weights"] is None else np.asarray(data["weights"], dtype=np.float64),
            None if data["phase"] is None else accounting.GaussianPhase(**data["phase"]),
            bool(data["releasable"]),
            None if data.get("learner") is None else {k: float(v) for k, v in data["learner"].items()},
        )


#: B: every smoothed proxy probability is at least SMOOTHING / CLASSES, so −log(λ·p) ≤ B for any λ.
LOSS_BOUND = float(-np.log(SMOOTHING / CLASSES))


#: the private methods: each runs a full-batch Gaussian mechanism on split A.
PRIVATE_METHODS = ("dpmixmin", "random_search")


def mix_epsilon(spec: MixingSpec, epsilon: float) -> float:
    """The mixture's share of a release's ε: all of it on its own split (parallel), else mix_share."""
    return spec.mix_share * epsilon if spec.composition == "sequential" else epsilon


def mixing_request(method: str, epsilon: float, spec: MixingSpec) -> accounting.CalibrationRequest | None:
    """The calibration of the full-batch phase ``method`` runs on split A to spend ``epsilon``;
    None for a free method."""
    if method not in PRIVATE_METHODS:
        return None
    steps = spec.mix_steps if method == "dpmixmin" else 1  # random search releases its M sums once
    return (epsilon, spec.delta, 1.0, steps, accounting.DEFAULT_ACCOUNTANT)


def mixing_phase(method: str, epsilon: float, spec: MixingSpec) -> accounting.GaussianPhase | None:
    """The DP phase ``method`` runs on split A to spend ``epsilon``; None for a free method."""
    request = mixing_request(method, epsilon, spec)
    if request is None:
        return None
    _, _, q, steps, _ = request
    return accounting.GaussianPhase(accounting.calibrate(*request), q, steps)


def mix_learner(
    spec: MixingSpec,
    phase: accounting.GaussianPhase | None = None,
    *,
    user_level: bool = False,
    secure: bool = False,
    tuned: Mapping[str, float] | None = None,
) -> LearnerConfig:
    """DP-MixMin's learner on split A: the spec's ``mix_*`` settings (C and η as rehearsed on
    public data when ``tuned``), running exactly the accounted full-batch ``phase`` (its σ, q
    and T; none: the spec's T at σ = 0, to check the settings)."""
    given: dict[str, Any] = {"user_level": user_level, "sample_rate": 1.0}
    if phase is not None:
        given.update(steps=phase.steps, sample_rate=phase.sample_rate)
    if tuned is not None:
        given.update(clip=tuned["clip"], learning_rate=tuned["learning_rate"])
    sigma = 0.0 if phase is None else phase.noise_multiplier
    return learner_config(spec, prefix="mix_", noise_multiplier=sigma, secure=secure, **given)


def _candidate_losses(problem: Problem, candidates: np.ndarray, user_level: bool, bound: float) -> np.ndarray:
    """Per-unit mixture losses, (units, M), clipped to [0, B]: −log(λ_m · p_j) per example, or
    its mean over each user's examples at user level."""
    losses = -np.log(np.exp(problem.logp) @ candidates.T)
    if user_level:
        _, owner = np.unique(present(problem.users, "user-level losses need user ids"), return_inverse=True)
        counts = np.bincount(owner)
        losses = np.stack([np.bincount(owner, weights=column) for column in losses.T], axis=1) / counts[:, None]
    return np.clip(losses, 0.0, bound)


#: λ★ per problem content, solved once per process: every seed and ε of a task mixes the same
#: full problem, and the solver (tolerance 1e-9) takes seconds near a vertex. Bounded.
_OPTIMA: dict[str, np.ndarray] = {}
_MAX_OPTIMA = 256


def optimum(full: Problem) -> np.ndarray:
    """λ★ of ``full`` (a copy: callers may not change the remembered one)."""
    digest = hashlib.sha256(str(full.logp.shape).encode())
    digest.update(np.ascontiguousarray(full.logp, dtype=np.float64).tobytes())
    key = digest.hexdigest()
    if key not in _OPTIMA:
        if len(_OPTIMA) >= _MAX_OPTIMA:
            _OPTIMA.pop(next(iter(_OPTIMA)))
        _OPTIMA[key] = mixmin(full.logp).weights
    return _OPTIMA[key].copy()


def choose(
    method: str,
    *,
    split_a: Problem,
    full: Problem,
    epsilon: float,
    spec: MixingSpec,
    seed: int,
    names: Mapping[str, object],
    secure: bool = False,
    user_level: bool = False,
    loss_bound: float = LOSS_BOUND,
    settings: dict[str, float] | None = None,
) -> Mixture:
    """λ for ``method`` with the mixing phase spending ``epsilon`` (at spec.delta) on split A.

    ``secure`` draws the private noise from the OS CSPRNG (not reproducible; for real releases).
    Seeded draws come from streams named by ``names`` (what split A is: its data, proxies, ρ and
    task), the method, ε and ``seed``, so no two tasks, rows, methods or seeds share noise (their
    released λ's differences do not cancel it).
    ``user_level``: neighbouring datasets differ by one user (split A must carry ``users``).
    ``settings``: DP-MixMin's C and η (``clip``, ``learning_rate``) chosen on public data, in place
    of the spec's (:mod:`..tuning`); they are kept in the mixture.
    """
    k = split_a.k
    if method in ("no_pretrain", "warm"):
        return Mixture(None, None)
    if method == "uniform":
        return Mixture(np.full(k, 1.0 / k), None)
    if method == "nonprivate_mixmin":
        return Mixture(optimum(full), None, releasable=False)
    phase = mixing_phase(method, epsilon, spec)
    if method == "dpmixmin" and phase is not None:
        config = mix_learner(spec, phase, user_level=user_level, secure=secure, tuned=settings)
        noise = (
            None if secure else stream(spec.seed, "learner-noise", **names, method=method, epsilon=epsilon, seed=seed)
        )
        return Mixture(fit(split_a, config, 1, noise).weights[0], phase, learner=settings)
    if method == "random_search" and phase is not None:
        ids = {**names, "epsilon": epsilon, "seed": seed}
        candidates = (
            stream(spec.seed, "random-search-candidates", **ids)
            .numpy()
            .dirichlet(np.ones(k), size=spec.search_candidates)
        )
        losses = _candidate_losses(split_a, candidates, user_level, loss_bound)
        gaussians = source(None if secure else stream(spec.seed, "random-search-noise", **ids))
        noisy = losses.sum(axis=0) + phase.noise_multiplier * loss_bound * np.sqrt(
            spec.search_candidates
        ) * gaussians.standard_normal(spec.search_candidates)
        return Mixture(candidates[int(np.argmin(noisy))], phase)
    raise ValueError(f"unknown method {method!r}")  # the spec validates methods; unreachable from it
