"""``check_dpsgd``: a user's own Opacus DP-SGD setup (their PrivacyEngine, loader, sampler,
normaliser, clipping, optimizer class), audited against the claim their accountant records.

**The probe.** ``setup(model, dataset)`` gets a model the check builds, an embedding with one
row per canary and as many rows that no example touches, and a dataset of ``examples`` rows.
Each canary is in with probability ½; a member's per-example gradient is ``GAIN`` · C on its own
row (a Dirac canary far beyond the clipping norm), every other example's gradient is 0. (A
non-member's slot holds such a zero-gradient example: for DP-SGD that sums clipped gradients and
divides by a fixed normaliser this is exactly the add/remove neighbour, and it keeps the
dataset's size, q and the claim the same in every run.) The check trains ``epochs`` epochs with
the user's loader and optimizer and keeps what the optimizer released on every row each step.

**The claim** is the accountant's history, (σ, q, T): what the user's ε was computed from.

**The tests**, each at level ``alpha`` (Bonferroni over the statistical ones):

1. *one-run audit* (sound: Steinke, Nasr & Jagielski's bound and the profile test of
   :mod:`..audit.one_run`, pooled over the runs, each canary in one run): no violation of the
   claimed profile. Catches large leaks: unclipped gradients, a q far from the one accounted.
2. *signal to noise*: on member canaries, the released value over the noise scale (measured on
   the untouched rows) has mean q/σ under the claim; a larger one (one-sided z-test) means less
   noise, a larger sampling rate or a looser clip than the accountant was told — σ/2, the σ_eff
   of Opacus PR #807, #813's q.
3. *normaliser*: the noise scale on the untouched rows is one number in every step of a run
   (Bartlett's test): a divisor that follows the realised batch size (Opacus #819, #571) varies.
4. *steps*: the accountant counted the steps the optimizer took.
5. *non-finite*: a run whose dataset holds examples with NaN and inf gradients releases only
   finite updates (deterministic).

What it does not see: the user's real data loader's behaviour on their data, their model's
per-sample gradients, or a normaliser that depends on the dataset's size only between runs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import accounting
from ..audit.dirac import dirac_scores
from ..audit.one_run.audit import audit_one_run
from ..audit.power import DETECTS_WITH, LEAKS
from ..base.errors import InputError, is_real, require
from ..base.randomness import RandomSource, SecureSource
from ..base.resources import bounded
from .accountant import POINT_SECONDS, TOLERANCE
from .failure import Case, Report
from .signal import Recorded, SignalTest, normal_quantile, signal_test

#: a canary's per-example gradient norm, in units of the optimizer's clipping norm C.
GAIN = 1000.0
#: a poison run holds enough NaN/inf examples that none is sampled with probability ≤ e^-POISON_EXPOSURE.
POISON_EXPOSURE = 21.0

#: what the user's setup returns: (PrivacyEngine, the private module, its DPOptimizer, the loader).
Setup = Callable[[Any, Any], tuple[Any, Any, Any, Any]]


@dataclass(frozen=True)
class ProbeRun:
    """One training run of the probe: the claim, each step's released rows, and each canary's membership."""

    claim: Recorded
    released: np.ndarray  # (T, rows) float64: what the optimizer handed its inner optimizer, per step
    membership: np.ndarray  # (m,) bool
    taken: int  # optimizer steps taken


def _probe(canaries: int) -> Any:
    """The embedding: rows [0, m) canaries, [m, 2m) untouched, 2m the filler, 2m + 1 the poison."""
    import torch

    embedding = torch.nn.Embedding(2 * canaries + 2, 1)
    torch.nn.init.zeros_(embedding.weight)  # the loss is linear in it: its values change nothing
    return embedding


def _dataset(canaries: int, examples: int, membership: np.ndarray, poison: int = 0) -> Any:
    """(row, gain) pairs: a member canary (its row, GAIN), a filler (2m, 0), or a poison example
    (2m + 1, NaN or inf)."""
    import torch
    from torch.utils.data import TensorDataset

    rows = np.full(examples, 2 * canaries, dtype=np.int64)
    gains = np.zeros(examples)
    rows[:canaries] = np.where(membership, np.arange(canaries), 2 * canaries)
    gains[:canaries] = np.where(membership, GAIN, 0.0)
    if poison:
        rows[canaries : canaries + poison] = 2 * canaries + 1
        gains[canaries : canaries + poison] = np.where(np.arange(poison) % 2 == 0, np.nan, np.inf)
    return TensorDataset(torch.from_numpy(rows), torch.from_numpy(gains).float())


def _claim(engine: Any, delta: float) -> Recorded:
    """The one (σ, q) the engine's accountant recorded, its steps, and its ε at δ."""
    accountant = getattr(engine, "accountant", None)
    history: Any = getattr(accountant, "history", None)
    require(
        isinstance(history, list) and len(history) >= 1,
        "setup must return an Opacus PrivacyEngine whose accountant records its steps (engine.accountant.history); "
        f"got {type(engine).__name__} with history {history!r}",
    )
    settings = {(float(s), float(q)) for s, q, _ in history}
    require(len(settings) == 1, f"check_dpsgd audits one (σ, q) per run; the accountant recorded {sorted(settings)}")
    (sigma, q), steps = settings.pop(), int(sum(int(t) for _, _, t in history))
    try:  # in a forked child under check_accountant's per-call deadline: any accountant answers or fails
        epsilon = float(
            bounded(engine.get_epsilon, delta, what=f"engine.get_epsilon({delta:g})", seconds=POINT_SECONDS)
        )
    except Exception as exc:  # the user's accountant
        raise ValueError(f"engine.get_epsilon({delta:g}) gave no ε: {type(exc).__name__}: {exc}") from None
    return Recorded(sigma, q, steps, epsilon)


def _checked_setup(result: Any) -> tuple[Any, Any, Any, Any]:
    from opacus.optimizers import DPOptimizer

    require(
        isinstance(result, tuple) and len(result) == 4,
        f"setup must return (engine, module, optimizer, data_loader), got {type(result).__name__}",
    )
    engine, module, optimizer, loader = result
    require(
        isinstance(optimizer, DPOptimizer),
        "setup's optimizer must be an Opacus DPOptimizer (from PrivacyEngine.make_private), "
        f"got {type(optimizer).__name__}",
    )
    require(hasattr(loader, "__iter__"), f"setup's data_loader must be iterable, got {type(loader).__name__}")
    return engine, module, optimizer, loader


def _train(
    setup: Setup, canaries: int, examples: int, membership: np.ndarray, *, epochs: int, delta: float, poison: int = 0
) -> ProbeRun:
    """One run of the user's setup on the probe; each step's released rows."""
    import torch

    data = _dataset(canaries, examples, membership, poison)
    engine, module, optimizer, loader = _checked_setup(setup(_probe(canaries), data))
    weight = next(p for p in module.parameters() if p.requires_grad)
    require(
        tuple(weight.shape) == (2 * canaries + 2, 1),
        "setup must train the model it was given (its embedding's weight is the only parameter the check reads)",
    )
    clip = float(optimizer.max_grad_norm)
    mean = getattr(optimizer, "loss_reduction", "mean") == "mean"
    released = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus' notes on secure RNG and backward hooks
        for _ in range(epochs):
            for rows, gains in loader:
                optimizer.zero_grad()
                out = module(rows).reshape(-1) * gains * clip
                loss = out.sum() / max(len(out), 1) if mean else out.sum()
                loss.backward()
                optimizer.step()
                grad = weight.grad if weight.grad is not None else torch.zeros_like(weight)
                released.append(grad.detach().reshape(-1).double().cpu().numpy().copy())
    require(len(released) >= 1, "the setup's loader yielded no batch: no step to audit")
    return ProbeRun(_claim(engine, delta), np.stack(released), membership, len(released))


def _noise_scale(run: ProbeRun, canaries: int) -> np.ndarray:
    """Each step's noise scale, the RMS of the rows no example touches (mean 0 under any normaliser)."""
    untouched = run.released[:, canaries : 2 * canaries]
    return np.sqrt(np.mean(untouched**2, axis=1))


def _signal_case(runs: list[ProbeRun], canaries: int, alpha: float) -> tuple[Case, dict[str, Any]]:
    """Test 2: members' released value over the noise scale has mean q/σ under the claim."""
    claim = runs[0].claim
    values = np.concatenate(
        [(r.released[:, :canaries] / _noise_scale(r, canaries)[:, None])[:, r.membership].ravel() for r in runs]
    )
    test = SignalTest(claim, len(values), sum(len(r.released) for r in runs), canaries, alpha)
    mean = float(np.mean(values))
    z, ratio, detects = test.z(mean), mean / test.expected, test.detects()
    critical = normal_quantile(1 - alpha)
    why = (
        f"members' signal/noise is {ratio:.3g}× what the claim "
        f"(σ={claim.noise_multiplier:.4g}, q={claim.sample_rate:.4g}) "
        f"implies (z = {z:.1f})"
    )
    if z > critical:
        why += ": less noise, a higher sampling rate or a looser clip than the accountant was told"
    why += "; at this size it catches " + ("no leak up to σ/10" if detects is None else f"σ/{detects:g}")
    why += f" with {DETECTS_WITH:.0%}"
    return Case("signal to noise", z <= critical, why), {"signal_ratio": ratio, "signal_z": z, "detects": detects}


def _normaliser_case(runs: list[ProbeRun], canaries: int, alpha: float) -> tuple[Case, dict[str, float]]:
    """Test 3: one noise scale in every step of a run (Bartlett's test of equal variances)."""
    from scipy.stats import bartlett

    worst_p, spread = 1.0, 0.0
    for r in runs:
        if len(r.released) < 2:
            continue
        groups = list(r.released[:, canaries : 2 * canaries])
        worst_p = min(worst_p, float(bartlett(*groups).pvalue))
        scale = _noise_scale(r, canaries)
        spread = max(spread, float(scale.std() / scale.mean()))
    threshold = alpha / max(1, len(runs))
    why = f"the noise scale varies by {spread:.1%} across steps (Bartlett p = {worst_p:.2g})"
    if worst_p < threshold:
        why += ": the update is divided by a number that changes with the batch (the realised batch size?), "
        why += "where the accountant assumes a fixed expected-size divisor"
    return Case("normaliser", worst_p >= threshold, why), {"normaliser_spread": spread, "normaliser_p": worst_p}


def _steps_case(runs: list[ProbeRun]) -> Case:
    wrong = [(r.claim.steps, r.taken) for r in runs if r.claim.steps != r.taken]
    if wrong:
        counted, taken = wrong[0]
        return Case("steps", False, f"the accountant counted {counted} steps, the optimizer took {taken}")
    return Case("steps", True, f"the accountant counted the {runs[0].taken} steps taken")


def _audit_case(runs: list[ProbeRun], canaries: int, delta: float, confidence: float) -> tuple[Case, dict[str, float]]:
    """Test 1: the one-run audit of the claimed profile, pooled over the runs."""
    claim = runs[0].claim
    released = np.concatenate([r.released[:, :canaries].T / _noise_scale(r, canaries) for r in runs])
    scores = dirac_scores(released * claim.noise_multiplier, claim.noise_multiplier, claim.sample_rate)
    membership = np.concatenate([r.membership for r in runs])
    phases = [claim.phase]
    epsilon = accounting.epsilon(phases, delta, "pld")
    result = audit_one_run(
        scores,
        membership,
        epsilon=epsilon,
        delta=delta,
        phases=phases,
        confidence=confidence,
        profile_bound=False,
        label="check_dpsgd",
    )
    why = (
        f"ε_LB {result.epsilon_lower_bound:.3f} against the claim's ε {epsilon:.3g} "
        f"({result.correct} of {result.guesses} guesses right, {len(scores)} canaries); the claimed profile "
        + ("is REJECTED" if result.profile_violation else "is not rejected")
    )
    return Case("one-run audit", not result.violation, why), {
        "epsilon_lower_bound": result.epsilon_lower_bound,
        "claimed_epsilon_pld": epsilon,
    }


def _claim_case(runs: list[ProbeRun], delta: float) -> Case:
    """The accountant's own ε is not below PLD's for the history it recorded (check_accountant's tolerance)."""
    claim = runs[0].claim
    pld = accounting.epsilon([claim.phase], delta, "pld")
    low = claim.epsilon < pld - TOLERANCE[0] - TOLERANCE[1] * pld
    why = f"the accountant reports ε {claim.epsilon:.4g}; PLD gives {pld:.4g} for its history"
    return Case("accountant's ε", not low, why + (": it under-reports" if low else ""))


def _finite_case(run: ProbeRun) -> Case:
    bad = np.flatnonzero(~np.all(np.isfinite(run.released), axis=1))
    if len(bad):
        return Case(
            "non-finite gradients",
            False,
            f"a NaN/inf per-example gradient reached the released update (step {bad[0] + 1} of {run.taken}): "
            "the update is NaN whenever that example is sampled, so its membership shows; "
            "guard with dpaudit_mix.models.nonfinite.guard_nonfinite(optimizer)",
        )
    return Case(
        "non-finite gradients", True, f"examples with NaN and inf gradients left all {run.taken} updates finite"
    )


#: the most runs ``detect`` may size a check_dpsgd to.
MAX_RUNS = 100


def _runs_to_detect(first: ProbeRun, runs: int, canaries: int, alpha: float, detect: float) -> int:
    """The fewest runs (at least ``runs``) whose signal test catches σ/``detect`` with 90 %, the
    claim and steps read from the ``first`` run."""
    for count in range(runs, MAX_RUNS + 1):
        caught = signal_test(first.claim, count, canaries, first.taken, alpha).detects()
        if caught is not None and caught <= detect:
            return count
    reached = signal_test(first.claim, MAX_RUNS, canaries, first.taken, alpha).detects()
    raise InputError(
        f"check_dpsgd cannot catch σ/{detect:g} within {MAX_RUNS} runs of {canaries} canaries at this setup "
        f"(σ = {first.claim.noise_multiplier:.4g}, q = {first.claim.sample_rate:.4g}, {first.taken} steps; "
        f"{MAX_RUNS} runs catch {'nothing up to σ/10' if reached is None else f'σ/{reached:g}'}): "
        "give more canaries or epochs, or a larger detect"
    )


def _check_arguments(
    setup: Setup, *, epochs: int, canaries: int, runs: int, examples: int, alpha: float, detect: float | None
) -> None:
    """check_dpsgd's arguments, each checked at the boundary (one InputError for the first bad one)."""
    require(callable(setup), f"setup must be callable, got {type(setup).__name__}")
    for name, value, low in (("epochs", epochs, 1), ("canaries", canaries, 20), ("runs", runs, 1)):
        require(
            isinstance(value, int) and not isinstance(value, bool) and value >= low,
            f"{name} must be an integer >= {low}, got {value!r}",
        )
    require(
        isinstance(examples, int) and not isinstance(examples, bool) and examples >= canaries + 2,
        f"examples must be an integer >= canaries + 2 ({canaries + 2}), got {examples!r}",
    )
    require(is_real(alpha) and 0 < alpha < 0.5, f"alpha must be in (0, 0.5), got {alpha!r}")
    require(
        detect is None or (is_real(detect) and LEAKS[0] <= detect <= LEAKS[-1]),
        f"detect must be None or in [{LEAKS[0]}, {LEAKS[-1]}], got {detect!r}",
    )


def check_dpsgd(
    setup: Setup,
    *,
    delta: float = 1e-5,
    epochs: int = 1,
    canaries: int = 2000,
    examples: int = 4000,
    runs: int = 3,
    alpha: float = 1e-3,
    nonfinite: bool = True,
    source: RandomSource | None = None,
    detect: float | None = None,
) -> Report:
    """Audit the DP-SGD a user's ``setup`` builds (the module docstring says how).

    Args:
      setup: ``setup(model, dataset) -> (engine, module, optimizer, data_loader)``.
      delta: the δ the accountant's ε is read at.
      epochs: epochs of the returned loader per run.
      canaries: canaries per run.
      examples: rows per run.
      runs: training runs.
      alpha: the level of each statistical test.
      nonfinite: also train a run with NaN and inf examples in its data, whose steps must
        release nothing non-finite.
      source: where memberships come from (the OS CSPRNG when None).
      detect: c, to size the check to catch σ/c (or c times the q or the clip it accounts):
        after the first run has shown the claim, as many more runs as that takes.

    Returns:
      The ``Report`` of a passed check; ``details["detects"]`` is the smallest c such that a
      setup drawing σ/c fails the signal test with 90 % (``SignalTest``).

    Raises:
      CheckFailed: an ``AssertionError`` naming what broke.
      ValueError: a bad argument, or a ``detect`` that would take more than ``MAX_RUNS`` runs.
    """
    _check_arguments(setup, epochs=epochs, canaries=canaries, runs=runs, examples=examples, alpha=alpha, detect=detect)
    accounting.check_delta(delta)
    draws: RandomSource = SecureSource() if source is None else source
    statistical = 3  # one-run audit, signal, normaliser share alpha

    def train() -> ProbeRun:
        return _train(setup, canaries, examples, draws.random(canaries) < 0.5, epochs=epochs, delta=delta)

    done = [train()]
    if detect is not None:
        runs = _runs_to_detect(done[0], runs, canaries, alpha / statistical, detect)
    done += [train() for _ in range(runs - 1)]
    claims = {(r.claim.noise_multiplier, r.claim.sample_rate, r.claim.steps) for r in done}
    require(len(claims) == 1, f"the runs recorded different claims {sorted(claims)}: setup must be the same each call")
    audit, audit_details = _audit_case(done, canaries, delta, 1 - alpha / statistical)
    signal, signal_details = _signal_case(done, canaries, alpha / statistical)
    normaliser, normaliser_details = _normaliser_case(done, canaries, alpha / statistical)
    cases = [_claim_case(done, delta), _steps_case(done), audit, signal, normaliser]
    if nonfinite:
        exposure = done[0].claim.sample_rate * done[0].taken  # how often one example is sampled in a run
        poison = min(examples - canaries, math.ceil(POISON_EXPOSURE / exposure))
        cases.append(
            _finite_case(
                _train(setup, canaries, examples, np.zeros(canaries, bool), epochs=epochs, delta=delta, poison=poison)
            )
        )
    claim = done[0].claim
    details = {
        "noise_multiplier": claim.noise_multiplier,
        "sample_rate": claim.sample_rate,
        "steps": claim.steps,
        "claimed_epsilon": claim.epsilon,
        "canaries": canaries * runs,
        "runs": runs,
        "detect": detect,
        **audit_details,
        **signal_details,
        **normaliser_details,
    }
    return Report("check_dpsgd", tuple(cases), details).raise_on_failure()
