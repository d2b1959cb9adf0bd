"""Weight recovery (docs/concepts/learner.md): how close private λ_DP is to the non-private λ★.

λ★ is MixMin on the full mixing data; DP-MixMin sees a seeded fraction ρ of it (of its users,
under user-level DP). Each cell (task, ε, ρ) is one vectorised learner call with ``seeds`` runs,
scored by cos★ = cos(λ_DP, λ★), L1 = ‖λ_DP − λ★‖₁ and excess loss α = L(λ_DP) − L(λ★) on the
full mixing data, beside the uniform references cos_u, L1_u, α_u. The seeds vary the DP noise;
the ρ-subsample of a cell is fixed by the spec seed, the same for every ε.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import numpy as np
from tqdm import tqdm

from ..base.backend import Backend
from ..base.errors import present, require
from ..base.randomness import stream
from ..base.resources import require_memory
from ..base.stats import sample_std
from ..data import registry
from ..learner import fit, fit_losses
from ..optimum import mixmin
from ..problem import Problem, load
from ..tuning import tune
from .metrics import cos_similarity, l1_distance
from .spec import RecoverySpec

#: α is reported in units of 1e-3, like the paper's Table 4.
ALPHA_UNIT = 1e-3


@dataclass(frozen=True)
class Target:
    """A problem and its non-private optimum: what one row of cells is measured against."""

    task: str
    problem: Problem
    lambda_star: np.ndarray
    loss_star: float


def _target(task: str, problem: Problem) -> Target:
    star = mixmin(problem.logp)
    return Target(task, problem, star.weights, float(star.loss))


@dataclass(frozen=True)
class Spread:
    """A metric over a cell's seeded runs: mean ± sample std, and every run's value."""

    mean: float
    std: float
    runs: tuple[float, ...]

    @classmethod
    def of(cls, values: np.ndarray) -> Spread:
        return cls(float(np.mean(values)), sample_std(values), tuple(float(v) for v in values))

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "std": self.std, "runs": list(self.runs)}


@dataclass(frozen=True)
class Score:
    """cos★, L1 and α of a cell's runs against λ★, with the uniform mixture's as references.
    Whether DP-MixMin beats uniform is a test over a cell's pairs (recovery/comparison.py), never
    a comparison of one score's means."""

    cos_star: Spread
    l1: Spread
    alpha_1e3: Spread
    cos_uniform: float
    l1_uniform: float
    alpha_uniform_1e3: float
    lambda_dp_mean: tuple[float, ...]


@dataclass(frozen=True)
class Cell:
    """One (task, k, ε, ρ, level) cell of a recovery run: where its runs were fitted, and their score."""

    task: str
    k: int
    epsilon: float | None
    rho: float
    user_level: bool
    n: int
    users: int | None
    noise_multiplier: float
    score: Score

    def to_dict(self) -> dict[str, Any]:
        """recovery.json's row: the cell's settings, then its score's fields."""
        score = self.score
        return {
            "task": self.task,
            "k": self.k,
            "epsilon": self.epsilon,
            "rho": self.rho,
            "user_level": self.user_level,
            "n": self.n,
            "users": self.users,
            "noise_multiplier": self.noise_multiplier,
            "cos_star": score.cos_star.to_dict(),
            "l1": score.l1.to_dict(),
            "alpha_1e3": score.alpha_1e3.to_dict(),
            "cos_uniform": score.cos_uniform,
            "l1_uniform": score.l1_uniform,
            "alpha_uniform_1e3": score.alpha_uniform_1e3,
            "lambda_dp_mean": list(score.lambda_dp_mean),
        }


def _subset_rows(problem: Problem, rho: float, user_level: bool, seed: int) -> np.ndarray:
    """The rows of the ρ fraction DP-MixMin sees: examples, or whole users under user-level DP.
    One draw per (task, ρ, unit), shared by every ε and k of it (a paired design)."""
    rng = stream(seed, "recovery-subset", task=problem.task, rho=rho, user_level=user_level, n=problem.n).numpy()
    if not user_level:
        return np.sort(rng.permutation(problem.n)[: max(1, round(rho * problem.n))])
    owners = present(problem.users, "user-level recovery needs user ids")
    users = np.unique(owners)
    chosen = rng.permutation(users)[: max(1, round(rho * len(users)))]
    return np.flatnonzero(np.isin(owners, chosen))


def score(target: Target, weights: np.ndarray) -> Score:
    """cos★, L1 and α of each run's λ against λ★, with the uniform references."""
    k = len(target.lambda_star)
    rows = np.vstack([weights, np.full(k, 1.0 / k)])  # the runs, then the uniform reference last
    alpha = (fit_losses(target.problem, rows) - target.loss_star) / ALPHA_UNIT
    cos = cos_similarity(rows, target.lambda_star)
    l1 = l1_distance(rows, target.lambda_star)
    cos_u, l1_u, alpha_u = float(cos[-1]), float(l1[-1]), float(alpha[-1])
    cos, l1, alpha = cos[:-1], l1[:-1], alpha[:-1]
    return Score(
        Spread.of(cos),
        Spread.of(l1),
        Spread.of(alpha),
        cos_u,
        l1_u,
        alpha_u,
        tuple(float(w) for w in weights.mean(axis=0)),
    )


@dataclass(frozen=True)
class RecoveryPlan:
    """Everything the spec asks for, resolved and validated before any fit runs."""

    spec: RecoverySpec  # with its defaults fitted to the problem (and C, η tuned on public data if asked)
    grid_targets: tuple[Target, ...]
    user_targets: tuple[Target, ...]
    k_pool: dict[str, Problem]  # task → the problem whose first k sources give the k-source problem
    tuning: dict[str, Any] | None  # how C and η were chosen on public data, if they were


def _available_tasks(spec: RecoverySpec, file_problem: Problem | None) -> tuple[str, ...]:
    if file_problem is None:
        return registry.tasks(spec.problem)
    return (file_problem.task or "file",)


def plan(spec: RecoverySpec) -> RecoveryPlan:
    """Resolve problems and tasks; every bad request fails here, before any output exists."""
    file_problem = None if spec.embedded else load(registry.problem_path(spec.problem))
    available = _available_tasks(spec, file_problem)
    offered = registry.max_sources(spec.problem) if file_problem is None else file_problem.k
    spec = spec.fitted_to(available, offered, file_problem is None or file_problem.users is not None)
    tuning = None
    if spec.tune_on_public:
        tuning = tune(
            registry.build_public(spec.problem, "multiclass", seed=spec.seed, proxy=spec.proxy_spec),
            epsilon=spec.k_epsilon,
            delta=spec.delta,
            steps=spec.steps,
            sample_rate=spec.sample_rate,
            seed=spec.seed,
        )
        spec = replace(spec, clip=tuning["clip"], learning_rate=tuning["learning_rate"])
    for key in ("tasks", "user_level_tasks", "k_tasks"):
        unknown = [t for t in getattr(spec, key) if t not in available]
        require(not unknown, f"{key}: unknown task(s) {', '.join(unknown)}; available: {', '.join(available)}")

    @cache
    def problem(task: str, shards: int = 0) -> Problem:
        """The task's problem: built from the embedded world (with ``shards`` k-scaling sources), or the file's."""
        if file_problem is not None:
            return file_problem
        return registry.build(spec.problem, task, seed=spec.seed, shards=shards, proxy=spec.proxy_spec)

    grid = tuple(_target(t, problem(t)) for t in (spec.tasks or available))
    for t in spec.user_level_tasks or ():
        require(problem(t).users is not None, f"user-level recovery needs 'users' in the problem ({t})")
    users = tuple(_target(t, problem(t)) for t in spec.user_level_tasks or ())
    pool: dict[str, Problem] = {}
    if spec.k_values:
        largest = max(spec.k_values)
        require(largest <= offered, f"k = {largest} is larger than the {offered} public sources available")
        for t in spec.k_tasks or ():
            pool[t] = problem(t, largest)
    return RecoveryPlan(spec, grid, users, pool, tuning)


def _cells(spec: RecoverySpec, the_plan: RecoveryPlan) -> Iterator[tuple[str, Target, float | None, float, bool]]:
    for user_level, targets in ((False, the_plan.grid_targets), (True, the_plan.user_targets)):
        for target in targets:
            for eps in spec.epsilons:
                for rho in spec.rhos:
                    yield "grid", target, eps, rho, user_level
            for rho in spec.rhos:  # the σ = 0 reference: same C, T, η; what is left is bias, not privacy
                yield "noiseless", target, None, rho, user_level
    for task, pool in the_plan.k_pool.items():
        for k in spec.k_values or ():
            yield "k", _target(task, pool.select_sources(np.arange(k))), spec.k_epsilon, spec.k_rho, False


#: bytes each (cell, run) keeps until the report: its per-run metrics as Python floats and JSON.
BYTES_PER_CELL_RUN = 400


@dataclass(frozen=True)
class RecoveryResult:
    """Every cell of a recovery run (recovery.json): the ε × ρ grid at example and user level, its
    σ = 0 floor, the public-data tuning, and the k-scaling fit. Cells are rows of a table."""

    spec: dict[str, Any]
    lambda_star: dict[str, list[float]]
    sources: list[str]
    cells: tuple[Cell, ...]
    noiseless: tuple[Cell, ...]
    tuning: dict[str, Any] | None
    k_scaling: dict[str, Any]  # its "cells" are Cells too

    def to_dict(self) -> dict[str, Any]:
        """recovery.json (the same JSON as when cells were dicts)."""
        return {
            "spec": self.spec,
            "lambda_star": self.lambda_star,
            "sources": self.sources,
            "cells": [c.to_dict() for c in self.cells],
            "noiseless": [c.to_dict() for c in self.noiseless],
            "tuning": self.tuning,
            "k_scaling": {**self.k_scaling, "cells": [c.to_dict() for c in self.k_scaling["cells"]]},
        }


@dataclass(frozen=True)
class CellJob:
    """What one cell runs: its kind, the target, ε (None: σ = 0), σ, ρ, the level and D's rows."""

    kind: str
    target: Target
    eps: float | None
    sigma: float
    rho: float
    user_level: bool
    rows: np.ndarray


def _cell(spec: RecoverySpec, threads: int | None, job: CellJob) -> Cell:
    """One cell: ``spec.seeds`` DP-MixMin runs at σ on ``rows`` of the target's problem, scored
    against λ★ (module level, so worker processes and Dask can ship it; its noise is its own
    stream). ``threads`` is the learner's (one per worker when cells run side by side)."""
    kind, target, eps, rho, user_level = job.kind, job.target, job.eps, job.rho, job.user_level
    config = spec.config(job.sigma, user_level)
    data = target.problem.subset(job.rows)
    noise = stream(
        spec.seed,
        "learner-noise",
        recovery=kind,
        task=target.task,
        **spec.proxy_spec.ids,
        k=len(target.lambda_star),
        epsilon="none" if eps is None else eps,
        rho=rho,
        user_level=user_level,
    )
    weights = fit(data, config, spec.seeds, noise, threads=threads).weights
    return Cell(
        target.task,
        len(target.lambda_star),
        eps,
        rho,
        user_level,
        data.n,
        None if data.users is None else len(np.unique(data.users)),
        config.noise_multiplier,
        score(target, weights),
    )


def run_recovery(spec: RecoverySpec, progress: bool = True, backend: Backend | None = None) -> RecoveryResult:
    """Every cell of the spec (recovery.json): the ε × ρ grid, user-level grid and k-scaling. The
    cells are independent: ``backend`` runs them side by side, with the same results."""
    the_plan = plan(spec)
    spec = the_plan.spec
    backend = backend or Backend()
    jobs = list(_cells(spec, the_plan))
    require_memory(
        len(jobs) * spec.seeds * BYTES_PER_CELL_RUN, f"recovery with seeds = {spec.seeds} over {len(jobs)} cells"
    )
    sigmas = {eps: 0.0 if eps is None else spec.noise_multiplier(eps) for eps in {job[2] for job in jobs}}
    rows: dict[tuple[str, float, bool, int], np.ndarray] = {}
    items = []
    for kind, target, eps, rho, user_level in jobs:
        unit = (target.task, rho, user_level, target.problem.n)
        if unit not in rows:
            rows[unit] = _subset_rows(target.problem, rho, user_level, spec.seed)
        items.append((CellJob(kind, target, eps, sigmas[eps], rho, user_level, rows[unit]),))
    done: dict[int, Cell] = {}
    bar = tqdm(total=len(jobs), desc="recovery cells", unit="cell", disable=not progress, file=sys.stderr)
    for i, cell in backend.unordered(_cell, items, shared=(spec, 1 if backend.parallel else None)):
        done[i] = cell
        bar.update()
    bar.close()
    cells: dict[str, list[Cell]] = {"grid": [], "noiseless": [], "k": []}
    for i, (kind, *_) in enumerate(jobs):
        cells[kind].append(done[i])
    return RecoveryResult(
        spec={key: list(v) if isinstance(v, tuple) else v for key, v in vars(spec).items()},
        lambda_star={t.task: t.lambda_star.tolist() for t in the_plan.grid_targets},
        sources=list(the_plan.grid_targets[0].problem.sources) if the_plan.grid_targets else [],
        cells=tuple(cells["grid"]),
        noiseless=tuple(cells["noiseless"]),
        tuning=the_plan.tuning,
        k_scaling=k_scaling_summary(spec, cells["k"]),
    )


def log_log_slope(cells: list[Cell], k_min: int) -> dict[str, Any] | None:
    """OLS of log α on log k (statsmodels) over every (task, k) cell with k ≥ ``k_min`` and mean α > 0:
    the slope and its 95% interval; None with fewer than three points or one k."""
    import statsmodels.api as sm

    points = [(c.k, c.score.alpha_1e3.mean) for c in cells if c.k >= k_min and c.score.alpha_1e3.mean > 0]
    if len(points) < 3 or len({k for k, _ in points}) < 2:
        return None
    k, alpha = np.log(np.array(points, dtype=float)).T
    fit = sm.OLS(alpha, sm.add_constant(k)).fit()
    low, high = fit.conf_int(0.05)[1]
    return {
        "k_min": k_min,
        "slope": float(fit.params[1]),
        "ci95": [float(low), float(high)],
        "points": len(points),
        "dropped_nonpositive": sum(1 for c in cells if c.k >= k_min and c.score.alpha_1e3.mean <= 0),
    }


def k_scaling_summary(spec: RecoverySpec, cells: list[Cell]) -> dict[str, Any]:
    """α against k, averaged over tasks (± std across tasks), and the log-log slope with its 95%
    interval for k ≥ k_fit_min and for all k (every task's cell is a point of the fit)."""
    average = []
    for k in spec.k_values or ():
        alphas = np.array([c.score.alpha_1e3.mean for c in cells if c.k == k])
        if len(alphas):
            average.append(
                {"k": k, "alpha_1e3_mean": float(alphas.mean()), "alpha_1e3_std_across_tasks": sample_std(alphas)}
            )
    fits = {"fit_range": log_log_slope(cells, spec.k_fit_min), "all_k": log_log_slope(cells, 0)}
    main = fits["fit_range"]
    return {
        "epsilon": spec.k_epsilon,
        "rho": spec.k_rho,
        "cells": tuple(cells),
        "average": average,
        "slope": None if main is None else main["slope"],
        "slope_ci95": None if main is None else main["ci95"],
        "fits": fits,
        "fit_range": sorted({c.k for c in cells if c.k >= spec.k_fit_min and c.score.alpha_1e3.mean > 0})
        if main
        else [],
    }
