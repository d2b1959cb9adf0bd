"""Dirac canaries inside a user's own Opacus training, audited from that one run.

``canaries = attach(optimizer, m)`` after ``PrivacyEngine.make_private`` (q is read from the
optimizer's Opacus accountant hook, the q its ε is counted at); the user's training loop runs
unchanged; ``canaries.audit(epsilon=..., delta=..., phases=canaries.phases())`` then tests the
claim with :func:`.one_run.audit_one_run`. Users reach it as :mod:`dpaudit_mix.canaries`.

How (Opacus' own DPOptimizer does the privatising): the canaries are m extra coordinates w,
one per canary, in a parameter group of their own that no example's loss reaches. Before
Opacus clips, every real example's per-sample gradient on w is 0 (so its norm, and its clipping,
are untouched); after Opacus has summed the clipped gradients, each canary that is a member
(probability ½, drawn once) and sampled this step (probability q, like any example under
Poisson sampling) adds C to its coordinate: a Dirac gradient of norm exactly the clipping norm.
Opacus then adds its own noise to w with the rest and divides by its expected batch size, which
the canaries do not change. What it released on w each step is kept: x_t σ = w.grad · B / C,
and the white-box score of each canary is the per-step likelihood ratio of :mod:`.dirac`.
The user's model never holds w: what they save has no canary coordinate. ``detach()`` takes w
out of the optimizer.

What this certifies: that the optimizer, as configured and as it ran (its σ, its clipping norm,
its noise, how often a canary's gradient entered), releases no more than the claim allows on a
worst-case example. It does not see a bug in how the user's loader samples their real examples
(the canaries are sampled here, at the stated q) or in per-sample gradients of their model;
input-space canaries (held-out or mislabelled examples scored by their loss, black-box) see the
whole pipeline, at far less power.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ... import accounting
from ...base.atomic import check_output
from ...base.errors import InputError, is_real, present, require
from ...base.randomness import RandomSource, SecureSource
from ...base.reporting import progress_steps
from ...base.resources import require_memory
from ..accounted import Accounted
from ..claim import Claim, claim_of
from ..dirac import dirac_scores
from .audit import MIN_CANARIES, STEPS, OneRunResult, audit_one_run
from .report import write_canary_report

#: seconds an audit call runs before its progress bar shows (the quick ones stay silent).
PROGRESS_AFTER = 2.0
#: bytes each canary keeps per step (its released value, float64).
BYTES_PER_CANARY_STEP = 8
#: how far a given phase's σ or q may sit from what ran (relative): float round-off, not a claim.
SAME_PHASE = 1e-9


@dataclass
class Canaries:
    """m canaries riding on an Opacus DPOptimizer, and what it released on them each step
    (made by :func:`attach`).

    Attributes:
      optimizer: the DPOptimizer they ride on.
      weight: their m coordinates, a parameter group of learning rate 0.
      membership: per canary, whether it is in the training set.
      sample_rate: q, the rate each member canary is sampled at each step.
      source: where the sampling draws come from.
      released: per step, what the optimizer released on the m coordinates (units of σC).
      noise_multipliers: per step, the σ the optimizer reported.
      engine: the engine's Opacus accountant, when given to :func:`attach`.
      audited: the scores and phases of the last audit, once audited.
    """

    optimizer: Any
    weight: Any  # torch.nn.Parameter (m,): the canary coordinates
    membership: np.ndarray  # (m,) bool: which canaries are in
    sample_rate: float
    source: RandomSource
    released: list[np.ndarray] = field(default_factory=list)  # per step, (m,): x_t σ
    noise_multipliers: list[float] = field(default_factory=list)  # per step: the σ the optimizer used
    engine: Any = None  # the Opacus accountant the optimizer's hook steps (None without one)
    #: the scores the last :meth:`audit` tested and the phases it claimed (what :meth:`report` shows)
    audited: tuple[np.ndarray, Sequence[accounting.GaussianPhase] | None] | None = None
    _restore: list[Callable[[], None]] = field(default_factory=list)

    @property
    def canaries(self) -> int:
        return len(self.membership)

    def scores(self, noise_multiplier: float | None = None, sample_rate: float | None = None) -> np.ndarray:
        """Each canary's white-box score under the claimed σ and q (default: the optimizer's σ and
        the stated q): the log-likelihood ratio of everything it released."""
        require(len(self.released) >= 1, "the canaries saw no step: train before auditing")
        sigma = self.optimizer.noise_multiplier if noise_multiplier is None else noise_multiplier
        q = self.sample_rate if sample_rate is None else sample_rate
        return dirac_scores(np.stack(self.released, axis=1), sigma, q)

    def phases(self) -> list[accounting.GaussianPhase]:
        """The phases the optimizer ran, as its Opacus accountant counted them: one per run of
        steps at one σ (a σ schedule gives several), each at the accounted q. Auditing against them
        asks whether what was released matches what was counted (a noise that is not the σ the
        optimizer reports shows)."""
        require(len(self.noise_multipliers) >= 1, "the canaries saw no step: train before auditing")
        return _merged([accounting.GaussianPhase(sigma, self.sample_rate, 1) for sigma in self.noise_multipliers])

    def ran(self, phases: Sequence[accounting.GaussianPhase] | None) -> list[accounting.GaussianPhase]:
        """The phases an audit tests: what the canaries saw (:meth:`phases`) when None; given
        ones only where they are that (σ and q to 1e-9 relative, every step counted), else one
        InputError naming both. A claim for fewer steps, or a larger σ, than the training ran would
        pass an audit of a mechanism that spent more than it claims."""
        seen = self.phases()
        history = getattr(self.engine, "history", None)
        if isinstance(history, list) and history:  # the engine's accountant counts every step it ran
            counted = sum(int(entry[2]) for entry in history)
            require(
                counted == len(self.released),
                f"the optimizer's accountant counted {counted} steps and the canaries saw {len(self.released)}: "
                "attach them before the first step and audit before any step after detach() (an audit of part of "
                "the training would test a claim smaller than what it spent)",
            )
        if phases is None:
            return seen
        given = list(phases)
        require(
            len(given) > 0,
            f"phases=[] states no mechanism: leave phases out to audit what the canaries saw, {_said(seen)}",
        )
        require(
            all(isinstance(p, accounting.GaussianPhase) for p in given),
            "phases must be GaussianPhase(noise_multiplier, sample_rate, steps) values",
        )
        merged = _merged(given)
        same = len(merged) == len(seen) and all(
            a.steps == b.steps
            and math.isclose(a.noise_multiplier, b.noise_multiplier, rel_tol=SAME_PHASE)
            and math.isclose(a.sample_rate, b.sample_rate, rel_tol=SAME_PHASE)
            for a, b in zip(merged, seen, strict=False)
        )
        require(
            same,
            f"the phases given ({_said(merged)}) are not what the canaries saw ({_said(seen)}): an audit "
            "tests the mechanism that ran; leave phases out to audit it",
        )
        return seen

    def final_scores(self) -> np.ndarray:
        """Each canary's black-box score: its coordinate after plain SGD on everything released,
        Σ_t x_t σ (what an observer of final weights that held w would see, up to the step size)."""
        require(len(self.released) >= 1, "the canaries saw no step: train before auditing")
        return np.nansum(np.stack(self.released, axis=1), axis=1)

    def audit(
        self,
        *,
        claim: Claim | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        phases: Sequence[accounting.GaussianPhase] | None = None,
        confidence: float = 0.95,
        accountant: str | None = None,
        seed: int | None = None,
    ) -> OneRunResult:
        """The one-run audit of the claim (ε, δ) for the phases the training ran (:meth:`phases`;
        ``phases`` given must be those, :meth:`ran`): the canaries are scored under the claimed σ
        and q (a σ the optimizer did not really use shows), and the claim's whole privacy profile
        is tested; ε must be what ``accountant`` gives for them. ``seed`` names the stream that
        ranks tied scores (default: from the OS CSPRNG, recorded in the result). The result's
        ``accounted`` names the accountant behind ε and, beside it, what the user's Opacus engine
        (its accountant's ``get_epsilon``) says of the training as it ran.

        Args:
          claim: the claim tested (:class:`~.claim.Claim`; its phases, if any, must be what ran);
            or state it by the keywords below.
          epsilon: the claimed ε (with ``delta``, ``phases``, ``accountant``: a Claim).
          delta: the claimed δ.
          phases: the phases claimed; None: what ran (:meth:`phases`).
          confidence: the level of the lower bounds.
          accountant: the accountant that calibrated σ (default PLD).
          seed: the tie-break stream's seed; None draws one from the OS CSPRNG.

        Returns:
          The :class:`~.one_run.OneRunResult`, its ``accounted`` with the engine's ε beside it.

        Raises:
          InputError: a claim for phases other than what ran, or steps the canaries never saw.
        """
        if claim is not None:
            require(isinstance(claim, Claim), f"claim must be a dpaudit_mix.Claim, got {type(claim).__name__}")
            require(
                epsilon is None and delta is None and phases is None and accountant is None,
                "give claim= or epsilon=/delta=/phases=/accountant=, not both (the claim holds them)",
            )
            epsilon, delta, phases, accountant = claim.epsilon, claim.delta, claim.phases, claim.accountant
        claimed = self.ran(phases)
        claim = claim_of(None, epsilon=epsilon, delta=delta, phases=claimed, accountant=accountant)
        sigma, q = claimed[-1].noise_multiplier, claimed[-1].sample_rate
        with progress_steps(len(STEPS), "one-run audit", delay=PROGRESS_AFTER) as step:
            self.audited = (self.scores(sigma, q), claimed)
            result = audit_one_run(
                self.audited[0],
                self.membership,
                claim=claim,
                confidence=confidence,
                step=step,
                seed=seed,
            )
        accounted = Accounted.of(claim.epsilon, claim.delta, claimed, claim.accountant)  # asked already: cached
        if self.engine is not None:  # what the user's own engine says of the training it ran
            accounted = replace(
                accounted,
                engine=str(self.engine.mechanism()),
                engine_epsilon=float(self.engine.get_epsilon(claim.delta)),
            )
        return replace(result, accounted=accounted)

    def report(self, out: str | Path, result: OneRunResult) -> Path:
        """``result`` (from :meth:`audit`) as ``audit-scores --one-run --out`` writes it: audit.json,
        report.md/html and canary_scores.png in the new folder ``out``, which is returned."""
        audited = present(self.audited, "audit the canaries before reporting: canaries.report(out, canaries.audit())")
        folder = check_output(Path(out), folder=True)
        scores, claimed = audited
        write_canary_report(folder, result, scores, self.membership, source="canaries.report", phases=claimed)
        return folder

    def detach(self) -> None:
        """Take the canary coordinates out of the optimizer (and its hooks), released values kept."""
        while self._restore:
            self._restore.pop()()


def _merged(phases: Sequence[accounting.GaussianPhase]) -> list[accounting.GaussianPhase]:
    """Consecutive phases of one σ and q as one (T added): one schedule, however it is cut."""
    runs: list[accounting.GaussianPhase] = []
    for p in phases:
        if runs and (runs[-1].noise_multiplier, runs[-1].sample_rate) == (p.noise_multiplier, p.sample_rate):
            p = replace(p, steps=runs.pop().steps + p.steps)
        runs.append(p)
    return runs


def _said(phases: Sequence[accounting.GaussianPhase]) -> str:
    return "; ".join(f"sigma {p.noise_multiplier:.6g}, q {p.sample_rate:.6g}, T {p.steps}" for p in phases)


def attach(
    optimizer: Any,
    m: int,
    *,
    accountant: Any = None,
    sample_rate: float | None = None,
    membership: np.ndarray | None = None,
    source: RandomSource | None = None,
) -> Canaries:
    """Attach ``m`` Dirac canaries to ``optimizer``, each in with probability ½ (or as
    ``membership`` says) and sampled at the training's q.

    Only Opacus' public attributes are read: q from ``sample_rate`` or, where the accountant has
    counted steps already, from the q of its newest ``history`` entry (both given: they must agree
    to 1e-9 relative, as a wrong q would make the audit test a claim the training never made).
    The accountant, when given, is the engine's own: ``Canaries.audit`` then refuses a training
    whose accountant counted steps the canaries never saw, and shows the engine's ε beside the
    audit's.

    Args:
      optimizer: the Opacus ``DPOptimizer`` that ``PrivacyEngine.make_private`` returned.
      m: the number of canaries, at least 10.
      accountant: the engine's Opacus accountant (``privacy_engine.accountant``), or None.
      sample_rate: the training's q (the ``sample_rate`` of the loader ``make_private`` returned,
        Opacus' ``1/len(loader)``); needed unless ``accountant`` has counted a step.
      membership: m values of 0 or 1 (tests, replays); None draws each from ``source``.
      source: where every draw comes from; None is the OS CSPRNG.

    Returns:
      The attached ``Canaries``; train unchanged, then ``audit`` them.

    Raises:
      InputError: an optimizer that is not a ``DPOptimizer``, a bad m, membership or q, or no q.
    """
    import torch
    from opacus.optimizers import DPOptimizer

    require(
        isinstance(optimizer, DPOptimizer), f"canaries attach to an Opacus DPOptimizer, got {type(optimizer).__name__}"
    )
    require(
        isinstance(m, (int, np.integer)) and not isinstance(m, bool) and m >= MIN_CANARIES,
        f"m must be an integer >= {MIN_CANARIES}, got {m!r}",
    )
    m = int(m)
    sample_rate = _training_sample_rate(accountant, sample_rate)
    require_memory(m * BYTES_PER_CANARY_STEP * 1000, f"{m} canaries over 1,000 steps")
    draws: RandomSource = SecureSource() if source is None else source
    member = draws.random(m) < 0.5 if membership is None else np.asarray(membership)
    require(
        member.shape == (m,) and bool(np.all((member == 0) | (member == 1))),
        f"membership must be {m} values of 0 or 1",
    )
    reference = optimizer.params[0]
    weight = torch.nn.Parameter(torch.zeros(m, dtype=reference.dtype, device=reference.device))
    optimizer.original_optimizer.add_param_group({"params": [weight], "lr": 0.0})
    canaries = Canaries(optimizer, weight, member.astype(bool), float(sample_rate), draws, engine=accountant)
    _hook_clipping(canaries)
    _hook_release(canaries)
    return canaries


def _accounted_history(accountant: Any) -> list[Any]:
    """The steps an Opacus accountant counted (its public ``history``: (σ, q, steps) entries)."""
    history = getattr(accountant, "history", None)
    if not (isinstance(history, list) and callable(getattr(accountant, "get_epsilon", None))):
        raise InputError(
            f"accountant must be an Opacus accountant (privacy_engine.accountant), got {type(accountant).__name__}"
        )
    return history


def _training_sample_rate(accountant: Any, given: float | None) -> float:
    """The q the training runs at: the given one, checked against the q the accountant has
    counted at (its newest history entry), or that q when none is given."""
    if given is not None:
        require(is_real(given) and 0 < given <= 1, f"sample_rate must be the training's q in (0, 1], got {given!r}")
    history = [] if accountant is None else _accounted_history(accountant)
    accounted = float(history[-1][1]) if history else None
    if accounted is None:
        if given is None:
            raise InputError(
                "no q to sample the canaries at: pass sample_rate= (the sample_rate of the loader make_private "
                "returned, Opacus' 1/len(loader))"
            )
        return float(given)
    if given is not None and abs(given - accounted) > 1e-9 * accounted:
        raise InputError(
            f"sample_rate={given!r} is not the q this optimizer's accountant counts at ({accounted!r}, Opacus' "
            "1/len(loader)): leave sample_rate out and attach reads it"
        )
    return accounted


def _hook_clipping(canaries: Canaries) -> None:
    """Before Opacus clips: a zero per-sample gradient on w for every real example; after it has
    summed: each member canary sampled this step adds C to its coordinate."""
    import torch

    optimizer, weight = canaries.optimizer, canaries.weight
    pre_step, clip_and_accumulate = optimizer.pre_step, optimizer.clip_and_accumulate

    def zero_on_canaries(closure: Any = None) -> Any:
        real = next(p for p in optimizer.params if p is not weight)
        batch = len(optimizer._get_flat_grad_sample(real))
        weight.grad_sample = torch.zeros((batch, canaries.canaries), dtype=weight.dtype, device=weight.device)
        return pre_step(closure)

    def with_canaries() -> None:
        clip_and_accumulate()
        sampled = canaries.membership & (canaries.source.random(canaries.canaries) < canaries.sample_rate)
        dirac = torch.from_numpy(sampled.astype(np.float64) * optimizer.max_grad_norm)
        weight.summed_grad = weight.summed_grad + dirac.to(weight.device, weight.dtype)

    optimizer.pre_step, optimizer.clip_and_accumulate = zero_on_canaries, with_canaries

    def restore() -> None:
        del optimizer.pre_step, optimizer.clip_and_accumulate

    canaries._restore.append(restore)


def _hook_release(canaries: Canaries) -> None:
    """After Opacus has noised and scaled: what it released on w, in units of σC per step."""
    optimizer, weight = canaries.optimizer, canaries.weight
    accountant_hook = optimizer.step_hook

    def record(opt: Any) -> None:
        require(opt.accumulated_iterations == 1, "canaries do not support gradient accumulation (one batch per step)")
        scale = opt.expected_batch_size if opt.loss_reduction == "mean" else 1.0
        canaries.released.append(weight.grad.detach().cpu().numpy().astype(np.float64) * scale / opt.max_grad_norm)
        canaries.noise_multipliers.append(float(opt.noise_multiplier))
        if accountant_hook is not None:
            accountant_hook(opt)

    optimizer.step_hook = record

    def restore() -> None:
        optimizer.step_hook = accountant_hook
        groups = optimizer.original_optimizer.param_groups
        groups[:] = [g for g in groups if not any(p is weight for p in g["params"])]

    canaries._restore.append(restore)
