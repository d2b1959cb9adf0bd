"""The DP-MixMin learner (docs/concepts/learner.md): R independent DP exponentiated-gradient fits at once.

Per-example loss ℓ_j(λ) = −log(λ·p_j) has gradient −p_j/(λ·p_j). EG ignores a constant added to
every coordinate, so we clip the centred gradient −p̃_j/(λ·p_j), p̃_j = p_j − mean(p_j): a fixed
per-example map, hence the same sensitivity, with a smaller norm. With Λ (k, R) the weights of R
runs and F = PΛ, the clipped weight of example j in run r is w_jr = min(1/f_jr, C/‖p̃_j‖), and
the clipped gradient sum of all runs is −P̃ᵀW: two GEMMs and two elementwise passes per step.

Runs are computed in blocks of :data:`BLOCK` consecutive run ids, always the same block for the
same run, so float results do not depend on how callers chunk the runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, cast

import numpy as np
from threadpoolctl import threadpool_limits

from .base.errors import present, require
from .base.randomness import RandomSource, SecureSource, Stream
from .base.specfile import check_fields
from .optimum import mixture_loss, scaled_likelihoods
from .problem import Problem

#: runs per computational block; chunks of an audit are whole numbers of blocks.
BLOCK = 64


@dataclass(frozen=True)
class LearnerConfig:
    """Hyper-parameters of DP-MixMin; ``noise_multiplier`` σ comes from the accountant.

    Attributes:
      steps: T, the exponentiated-gradient steps.
      clip: C, the clipping norm of each example's (or user's) gradient.
      noise_multiplier: σ (0: no noise, the non-private learner).
      sample_rate: q, the Poisson rate of each step's batch.
      learning_rate: η of the exponentiated-gradient step.
      user_level: clip and sample users (the problem's ``users``), not examples.
      secure: every noise draw from the OS CSPRNG (a release), not a named stream.
    """

    steps: int = 100
    clip: float = 3.0
    noise_multiplier: float = 0.0
    sample_rate: float = 1.0
    learning_rate: float = 1.0
    user_level: bool = False
    secure: bool = False

    def __post_init__(self) -> None:
        check_fields(self)
        require(self.steps >= 1, f"steps T must be >= 1, got {self.steps}")
        require(self.clip > 0, f"clipping norm C must be > 0, got {self.clip}")
        require(self.noise_multiplier >= 0, f"noise multiplier must be >= 0, got {self.noise_multiplier}")
        require(0 < self.sample_rate <= 1, f"sample rate q must be in (0, 1], got {self.sample_rate}")
        require(self.learning_rate > 0, f"learning rate must be > 0, got {self.learning_rate}")

    @property
    def poisson(self) -> bool:
        return self.sample_rate < 1.0


#: the :class:`LearnerConfig` fields a spec does not give: σ comes from the accountant, and where
#: the noise comes from is the caller's (a release's is always the OS CSPRNG).
RUN_FIELDS = ("noise_multiplier", "secure")


def learner_settings(spec: object, *, prefix: str = "", **given: Any) -> dict[str, Any]:
    """The learner's settings that ``spec`` gives: every :class:`LearnerConfig` field but
    :data:`RUN_FIELDS`, read from the spec's key of that name (``prefix`` first: a pipeline spec's
    ``mix_clip``), unless ``given`` (what the caller runs instead: the accounted phase's T and q,
    a tuned C and η, a grid cell's user level). A field the spec lacks and the caller does not
    give is an error naming it, never a default: a setting added to the learner reaches every
    spec kind, or every spec kind fails, so an audited learner cannot silently differ from the
    released one."""
    settings: dict[str, Any] = {}
    for field in fields(LearnerConfig):
        if field.name in RUN_FIELDS:
            continue
        if field.name in given:
            settings[field.name] = given.pop(field.name)
        elif hasattr(spec, prefix + field.name):
            settings[field.name] = getattr(spec, prefix + field.name)
        else:
            raise TypeError(f"{type(spec).__name__} has no {prefix + field.name}: the learner needs it given")
    if given:
        raise TypeError(f"not settings of the learner: {sorted(given)}")
    return settings


def learner_config(
    spec: object, *, prefix: str = "", noise_multiplier: float = 0.0, secure: bool = False, **given: Any
) -> LearnerConfig:
    """The one place a spec becomes a learner: :func:`learner_settings` with σ and the noise's source."""
    return LearnerConfig(
        **learner_settings(spec, prefix=prefix, **given), noise_multiplier=noise_multiplier, secure=secure
    )


@dataclass(frozen=True)
class Canary:
    """An extra contribution present only in runs that include the canary (docs/concepts/audit.md).

    Exactly one of ``logp`` (a natural canary: a real example's proxy log-likelihoods, (k,),
    clipped like any example; or a real user's, (m, k), whose summed gradient is clipped like any
    user's) and ``gradient`` (a fixed max-clip gradient, injected as is) is set.
    """

    logp: np.ndarray | None = None
    gradient: np.ndarray | None = None

    def __post_init__(self) -> None:
        require(
            (self.logp is None) != (self.gradient is None),
            "a canary is either natural (logp) or max-clip (gradient), not both or neither",
        )


@dataclass(frozen=True)
class FitResult:
    """λ of every run, (R, k); with a canary, the white-box score of every run, (R,)."""

    weights: np.ndarray
    whitebox_scores: np.ndarray | None = None


@dataclass(frozen=True)
class _Prepared:
    """Per-problem constants shared by all runs (computed once, read-only)."""

    p: np.ndarray  # (n, k) float32, rows scaled by their max
    p_centred: np.ndarray  # (n, k) float32
    norm_centred: np.ndarray  # (n,) ‖p̃_j‖
    user_starts: np.ndarray | None  # row offsets of each user's block (rows sorted by user)
    units: int  # sampling units: examples, or users


def _prepare(problem: Problem, user_level: bool) -> _Prepared:
    logp = problem.logp
    user_starts = None
    units = problem.n
    if user_level:
        users = present(problem.users, "user-level DP needs a problem file with 'users'")
        order = np.argsort(users, kind="stable")
        logp = logp[order]
        sorted_users = users[order]
        user_starts = np.flatnonzero(np.r_[True, sorted_users[1:] != sorted_users[:-1]])
        units = len(user_starts)
    p, _ = scaled_likelihoods(logp)
    centred = p - p.mean(axis=1, keepdims=True)
    return _Prepared(
        p=np.ascontiguousarray(p, dtype=np.float32),
        p_centred=np.ascontiguousarray(centred, dtype=np.float32),
        norm_centred=np.linalg.norm(centred, axis=1).astype(np.float32),
        user_starts=user_starts,
        units=units,
    )


def _clip_weights(f: np.ndarray, floor: np.ndarray | float) -> np.ndarray:
    """Clipped per-example weights in place: min(1/f, C/‖p̃‖) = 1 / max(f, ‖p̃‖/C) with floor = ‖p̃‖/C.
    1/x by ``np.divide``: numpy's float32 ``reciprocal`` loop took twice as long (113 against 56
    µs on a block's 9,000 × 64 weights), and the same IEEE division gives the same bits."""
    np.maximum(f, floor, out=f)
    return cast(np.ndarray, np.divide(1.0, f, out=f))


def _noise_scale(sigma_clip: float, k: int) -> np.ndarray:
    """Standard deviation of the noise on each of the k coordinates, (k, 1): σC on every one."""
    return np.full((k, 1), sigma_clip, dtype=np.float32)


def _normaliser(sample_rate: float, units: int, mask: np.ndarray | None, canary_in: np.ndarray) -> float | np.ndarray:
    """The divisor of the noisy sum: the public expected batch size qn, never the realised one
    (the sampled ``mask`` and ``canary_in``: dividing by them would make the divisor itself reveal
    membership). They are the interface's so that a variant may misuse them; they cost nothing."""
    return sample_rate * units


@dataclass(frozen=True)
class Privatiser:
    """How a step of the learner privatises its gradient sum: the clipped weight of each example
    (``clip_weights(f, ‖p̃‖/C)``, in place), the noise's standard deviation per coordinate
    (``noise_scale(σC, k)``, (k, 1)) and the divisor of the noisy sum (``normaliser(q, units,
    mask, canary_in)``: the sampled units and canary of each run). The shipped one is the
    DP-MixMin mechanism; verify-accountant audits deliberately broken ones, and a user may audit
    a variant of their own the same way."""

    clip_weights: Callable[[np.ndarray, np.ndarray | float], np.ndarray] = _clip_weights
    noise_scale: Callable[[float, int], np.ndarray] = _noise_scale
    normaliser: Callable[[float, int, np.ndarray | None, np.ndarray], float | np.ndarray] = _normaliser


SHIPPED = Privatiser()


def _clipped_sum(
    prep: _Prepared,
    lam: np.ndarray,
    clip: float,
    mask: np.ndarray | None,
    privatiser: Privatiser = SHIPPED,
    floor: np.ndarray | None = None,
) -> np.ndarray:
    """Σ over sampled units of the clipped centred gradients, (k, R) for λ of shape (k, R).
    ``floor``: ‖p̃‖/C for each example and run, (n, R), where the caller keeps it between steps
    (a floor broadcast from (n, 1) made numpy's maximum twice as slow)."""
    f = prep.p @ lam
    if prep.user_starts is None:
        privatiser.clip_weights(f, (prep.norm_centred / clip)[:, None] if floor is None else floor)
        if mask is not None:
            f *= mask
        return cast(np.ndarray, -(prep.p_centred.T @ f))
    np.divide(1.0, f, out=f)
    per_example = prep.p_centred[:, :, None] * f[:, None, :]  # (n, k, R)
    per_user = np.add.reduceat(per_example, prep.user_starts, axis=0)  # (U, k, R)
    norms = np.sqrt(np.einsum("ukr,ukr->ur", per_user, per_user))
    scale = np.minimum(1.0, clip / np.maximum(norms, 1e-30))
    if mask is not None:
        scale *= mask
    return cast(np.ndarray, -np.einsum("ukr,ur->kr", per_user, scale))


def _canary_gradient(canary: Canary, lam: np.ndarray, clip: float, privatiser: Privatiser) -> np.ndarray:
    """The canary's clipped gradient in every run, (k, R), whether or not it is included."""
    if canary.gradient is not None:
        return np.broadcast_to(canary.gradient.astype(np.float32)[:, None], lam.shape)
    logp = present(canary.logp, "a canary needs a gradient or log-likelihoods")
    if logp.ndim == 2:  # a user: the rows' gradients summed, then clipped as one
        p, _ = scaled_likelihoods(logp)
        summed = -((p - p.mean(axis=1, keepdims=True)).T @ (1.0 / (p @ lam)))  # (k, R)
        norms = np.linalg.norm(summed, axis=0)
        clipped: np.ndarray = (summed * np.minimum(1.0, clip / np.maximum(norms, 1e-30))).astype(np.float32)
        return clipped
    p, _ = scaled_likelihoods(logp[None, :])
    centred = (p - p.mean())[0]
    weight = privatiser.clip_weights(p[0] @ lam, float(np.linalg.norm(centred)) / clip)
    single: np.ndarray = -(centred[:, None] * weight[None, :]).astype(np.float32)
    return single


def _log_normalise(log_lam: np.ndarray) -> None:
    """log λ ← log λ − logsumexp(log λ) for each run (column), in place; the largest entry is
    shifted to 0 first, so the sum lies in [1, k]. scipy's logsumexp computes the same, but its
    array-API dispatch on these (k, 64) blocks was a third of an audit's CPU."""
    log_lam -= log_lam.max(axis=0)
    log_lam -= np.log(np.exp(log_lam).sum(axis=0))


def _fit_block(
    prep: _Prepared,
    config: LearnerConfig,
    runs: np.ndarray,
    noise: Stream | None,
    *,
    canary: Canary | None,
    include: np.ndarray | None,
    privatiser: Privatiser,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Fit the runs of one block; returns weights (R, k) and white-box scores (R,) or None."""
    k = prep.p.shape[1]
    r_count = len(runs)
    T, C, q = config.steps, config.clip, config.sample_rate
    noise_scale = privatiser.noise_scale(config.noise_multiplier * C, k)
    streams: list[RandomSource] = [SecureSource()] * r_count if noise is None else [noise.run(int(r)) for r in runs]
    if not config.poisson:
        gaussians = np.stack([s.standard_normal((T, k)) for s in streams], axis=2).astype(np.float32)
    log_lam = np.full((k, r_count), -np.log(k))
    floor = None if prep.user_starts is not None else np.repeat((prep.norm_centred / C)[:, None], r_count, axis=1)
    scores = np.zeros(r_count) if canary is not None else None
    included = np.zeros(r_count, dtype=np.float32) if include is None else include.astype(np.float32)
    for t in range(T):
        lam = np.exp(log_lam).astype(np.float32)
        mask = None
        canary_in = included
        if config.poisson:
            # One draw per unit plus one for the canary, from each run's own stream.
            draws = np.stack([s.random(prep.units + 1) for s in streams], axis=1) < q
            mask = draws[:-1].astype(np.float32)
            canary_in = included * draws[-1]
            step_noise = np.stack([s.standard_normal(k) for s in streams], axis=1).astype(np.float32)
        else:
            step_noise = gaussians[t]
        total = _clipped_sum(prep, lam, C, mask, privatiser, floor)
        if canary is not None:
            canary_grad = _canary_gradient(canary, lam, C, privatiser)
            residual = canary_in * canary_grad + noise_scale * step_noise
            if config.poisson:
                # A real attacker sees only the noisy sum and λ_t: subtract the sum expected
                # under sampling, not the realised one (that would void amplification).
                residual += total - q * _clipped_sum(prep, lam, C, None, privatiser, floor)
            total = total + canary_in * canary_grad
            norms = np.linalg.norm(canary_grad, axis=0)
            scores += np.einsum("kr,kr->r", residual, canary_grad) / np.maximum(norms, 1e-30)
        total = total + noise_scale * step_noise
        normaliser = privatiser.normaliser(q, prep.units, mask, canary_in)
        log_lam -= config.learning_rate * total.astype(np.float64) / normaliser
        _log_normalise(log_lam)
    return np.exp(log_lam).T, scores


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def _checked_canary(
    problem: Problem, config: LearnerConfig, canary: Canary | None, include: np.ndarray | None, run_ids: np.ndarray
) -> np.ndarray | None:
    """``include`` checked against the canary and the runs (all False for a canary without it)."""
    if include is not None:
        require(canary is not None, "include was given without a canary")
        require(include.shape == run_ids.shape, "include needs one flag per run")
    if canary is None:
        return include
    vec = present(
        canary.gradient if canary.gradient is not None else canary.logp, "a canary needs a gradient or log-likelihoods"
    )
    require(
        vec.shape[-1:] == (problem.k,) and vec.ndim <= 2 and len(vec) >= 1,
        f"canary must have k = {problem.k} entries per row",
    )
    require(vec.ndim == 1 or config.user_level, "a canary of several examples (a user) needs user-level DP")
    return np.zeros(len(run_ids), dtype=bool) if include is None else include


def fit(
    problem: Problem,
    config: LearnerConfig,
    runs: int | np.ndarray,
    noise: Stream | None = None,
    *,
    canary: Canary | None = None,
    include: np.ndarray | None = None,
    threads: int | None = None,
    privatiser: Privatiser | None = None,
) -> FitResult:
    """Run the DP-MixMin fits with run ids ``runs`` in one call (blocks of runs spread over
    threads, as numpy releases the GIL, each with a single-threaded BLAS).

    Args:
      problem: the mixing problem fitted.
      config: the learner's hyper-parameters.
      runs: run ids (an int R means 0..R−1).
      noise: the stream run r draws its noise and Poisson masks from (``noise.run(r)``); None
        exactly when ``config.secure``, and then every draw comes from the OS CSPRNG.
      canary: a canary added to the runs ``include`` marks.
      include: per run, whether its dataset contains ``canary``.
      threads: threads to use (default: the cores).
      privatiser: each step's privatisation (None: ``SHIPPED``, the mechanism as released).

    Returns:
      The ``FitResult``: each run's λ (and what an audit reads of it).

    Raises:
      InputError: no runs, a noise stream given with ``config.secure`` (or none without it),
        ``include`` without a canary or of another length, or a canary of several examples
        without user-level DP.
    """
    run_ids = np.arange(runs) if isinstance(runs, (int, np.integer)) else np.asarray(runs)
    require(run_ids.ndim == 1 and len(run_ids) >= 1, "need at least one run")
    require(
        config.secure == (noise is None),
        "a fit draws from a named stream, or from the OS CSPRNG when config.secure; give exactly one",
    )
    include = _checked_canary(problem, config, canary, include, run_ids)
    prep = _prepare(problem, config.user_level)
    step = SHIPPED if privatiser is None else privatiser
    # Group runs by block id, padding each block to BLOCK runs so float results are chunk-free.
    blocks = np.unique(run_ids // BLOCK)
    threads = threads or default_threads()

    def one(block: int) -> tuple[np.ndarray, np.ndarray | None]:
        ids = np.arange(block * BLOCK, (block + 1) * BLOCK)
        inc = None
        if include is not None:
            inc = np.zeros(BLOCK, dtype=bool)
            where = np.flatnonzero(run_ids // BLOCK == block)
            inc[run_ids[where] - block * BLOCK] = include[where]
        return _fit_block(prep, config, ids, noise, canary=canary, include=inc, privatiser=step)

    with threadpool_limits(limits=1):
        if threads == 1 or len(blocks) == 1:
            results = [one(b) for b in blocks]
        else:
            with ThreadPoolExecutor(threads) as pool:
                results = list(pool.map(one, blocks))
    by_block = {b: i for i, b in enumerate(blocks)}
    pos = np.array([by_block[b] for b in run_ids // BLOCK])
    off = run_ids % BLOCK
    weights = np.stack([res[0] for res in results])[pos, off]
    # A λ that overflowed is a silent wrong answer downstream (an audit that sees nothing, a
    # release of garbage): refuse it here, for every caller.
    require(
        bool(np.all(np.isfinite(weights))),
        f"{int(np.sum(~np.isfinite(weights).all(axis=1)))} of "
        f"{len(run_ids)} fits gave a non-finite λ (learning rate {config.learning_rate:g} too large?)",
    )
    scores = None
    if canary is not None:
        scores = np.stack([present(res[1], "a canary run returned no scores") for res in results])[pos, off]
    return FitResult(weights, scores)


def clipped_gradient_sum(problem: Problem, lam: np.ndarray, clip: float, user_level: bool = False) -> np.ndarray:
    """The clipped centred gradient sum over all units at λ of shape (k, R) (one step, no noise)."""
    return _clipped_sum(_prepare(problem, user_level), lam.astype(np.float32), clip, None)


def fit_losses(problem: Problem, weights: np.ndarray) -> np.ndarray:
    """L(λ) on ``problem`` for each row of ``weights``."""
    return mixture_loss(problem.logp, weights)
