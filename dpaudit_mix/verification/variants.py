"""The release under verification, and deliberately broken variants of it (mutants).

A release turns a claim (ε, δ, q, T) into a noise multiplier σ (the *wiring*: which numbers the
accountant is told) and then runs a mechanism (the learner's DP step: clipping, noise,
normaliser; the pipeline's Opacus DP-SGD; its user-level DP-SGD). A :class:`Variant` names each
part it runs. The shipped variant runs the package as released; a mutant replaces one part with
a broken one that is itself a registered thing of its kind: a broken accountant is an accountant
(``verify.pld-half-steps``), a broken learner is a :class:`~..learner.Privatiser`, a broken DP-SGD
is a mechanism (``verify.opacus-sigma-halved``, ...) that an audit runs by name. Nothing in the
package is patched, and the checks exercise each variant only through the parts it names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from .. import accounting, learner
from ..audit.mechanisms import register_mechanism
from ..audit.mechanisms.dpmixmin import DPMixMin
from ..audit.mechanisms.dpsgd import OpacusCollector, OpacusMechanism, UserCollector, UserDPSGDMechanism
from ..audit.mechanisms.once import OpacusCanaryRun, UserCanaryRun
from ..base.randomness import RandomSource
from ..models import opacus_sgd, userdp
from .parts import ACCOUNTANT, LEARNER, OPACUS, USER_DPSGD, WIRING

#: σ for the claim (ε, δ, q, T) with the variant's calibrating accountant.
NoiseRule = Callable[[float, float, float, int, str], float]


def _calibrated(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    return accounting.calibrate(epsilon, delta, sample_rate, steps, accountant)


@dataclass(frozen=True)
class Variant:
    """What a verified release runs: ``noise_multiplier`` (the wiring), ``accountants`` (a
    built-in accountant's name → the registered one it runs instead), ``privatiser`` (the
    learner's DP step; None: shipped), ``audited`` (a built-in mechanism → the registered variant
    the empirical checks audit instead); ``breaks`` names the parts it changes."""

    name: str
    description: str
    noise_multiplier: NoiseRule = _calibrated
    accountants: tuple[tuple[str, str], ...] = ()
    privatiser: learner.Privatiser | None = None
    audited: tuple[tuple[str, str], ...] = ()
    one_run: tuple[tuple[str, type[OpacusCanaryRun] | type[UserCanaryRun]], ...] = ()
    breaks: frozenset[str] = field(default_factory=frozenset)

    def accountant(self, name: str = accounting.DEFAULT_ACCOUNTANT) -> str:
        """The registered accountant this variant runs where the release uses ``name``."""
        return dict(self.accountants).get(name, name)

    def sigma(self, epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
        """σ this variant's release runs with for the claim (ε, δ, q, T)."""
        return self.noise_multiplier(epsilon, delta, sample_rate, steps, self.accountant())

    def mechanism(self, name: str) -> str:
        """The registered mechanism this variant's audits run where the release runs ``name``."""
        return dict(self.audited).get(name, name)

    def canary_run(self, name: str) -> type[OpacusCanaryRun] | type[UserCanaryRun]:
        """What trains the DP-SGD ``name`` once with canaries in this variant (the one-run check)."""
        shipped = {"opacus": OpacusCanaryRun, "user-dpsgd": UserCanaryRun}
        return dict(self.one_run).get(name, shipped[name])


HONEST = Variant("honest", "the package as shipped")


# --- the accountant ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HalfStepsPLD:
    """dp_accounting's PLD told T/2 steps of every phase: a composition bug."""

    name: str = "verify.pld-half-steps"

    def epsilon(self, phases: Sequence[accounting.GaussianPhase], delta: float) -> float:
        halved = [replace(p, steps=max(1, p.steps // 2)) for p in phases]
        return accounting.epsilon(halved, delta, "pld")


@dataclass(frozen=True)
class PRVLowerEstimate:
    """Opacus' PRV reporting the lower end of its estimate's interval, ε − 2·eps_error, unclamped:
    negative where ε is tiny (Opacus #585, fixed by clamping in PR #844)."""

    name: str = "verify.prv-lower-estimate"

    def epsilon(self, phases: Sequence[accounting.GaussianPhase], delta: float) -> float:
        return accounting.epsilon(phases, delta, "prv") - 2 * PRV_EPS_ERROR


#: Opacus' PRV accountant's default eps_error.
PRV_EPS_ERROR = 0.01
#: the σ_eff mutant's AdaClip-style clip-count noise σ_b, as a multiple of the gradient's σ.
SIGMA_B_FACTOR = 1.0


def _adaclip_sigma(sigma_eff: float) -> float:
    """The σ a release adds when its accountant was told σ_eff = (σ⁻² − (2σ_b)⁻²)^(−1/2) > σ
    (Opacus PR #807's AdaClip bug): σ = σ_eff (1 + (1/(2k))²)^(−1/2), σ_b = k σ_eff, k = SIGMA_B_FACTOR."""
    return sigma_eff / math.sqrt(1 + (1 / (2 * SIGMA_B_FACTOR)) ** 2)


# --- the learner's DP step -----------------------------------------------------------------------

#: the loose-clipping mutant clips at this multiple of the C that noise and accountant assume.
LOOSE_CLIP_FACTOR = 1.5
_SHIPPED_STEP = learner.SHIPPED  # the shipped DP step the mutants below alter


def _no_clipping(f: np.ndarray, floor: np.ndarray | float) -> np.ndarray:
    return np.reciprocal(f, out=f)


def _loose_clipping(f: np.ndarray, floor: np.ndarray | float) -> np.ndarray:
    return _SHIPPED_STEP.clip_weights(f, floor / LOOSE_CLIP_FACTOR)


def _half_noise(sigma_clip: float, k: int) -> np.ndarray:
    scale = _SHIPPED_STEP.noise_scale(sigma_clip, k)
    scale[(k + 1) // 2 :] = 0.0
    return scale


def _realised_normaliser(sample_rate: float, units: int, mask: np.ndarray | None, canary_in: np.ndarray) -> np.ndarray:
    batch = (units if mask is None else mask.sum(axis=0)) + canary_in
    return np.maximum(batch, 1.0)


# --- the pipeline's DP-SGD -----------------------------------------------------------------------


class _HalfNoise:
    """The Opacus optimizer adds half the noise it was made private with (in either audit of it:
    many runs of the probe, or one run of the SmallCNN with canaries)."""

    def make_private(self, probe: nn.Module, sigma: float) -> opacus_sgd.Private:
        private: opacus_sgd.Private = super().make_private(probe, sigma)  # type: ignore[misc]
        private.optimizer.noise_multiplier /= 2
        return private


@dataclass(frozen=True)
class HalfNoiseOpacus(_HalfNoise, OpacusCollector):
    """The Opacus optimizer adds half the noise it was made private with (the multi-run probe)."""


@dataclass(frozen=True)
class HalfNoiseOpacusOnce(_HalfNoise, OpacusCanaryRun):
    """The Opacus optimizer adds half the noise it was made private with (the one-run SmallCNN)."""


@dataclass(frozen=True)
class FixedSizeBatchesOpacus(OpacusCollector):
    """An epoch of fixed-size batches (a shuffle cut in ``count``), where the accountant assumes Poisson."""

    def sampler(
        self, data: TensorDataset, sample_rate: float, count: int, draws: RandomSource
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        inputs, labels = data.tensors
        for rows in np.array_split(np.argsort(draws.random(len(labels))), count):
            index = torch.from_numpy(rows)
            yield inputs[index], labels[index]


@dataclass(frozen=True)
class PerWindowUserDPSGD(UserCollector):
    """User-level DP-SGD that clips each window's gradient to C and sums a user's windows
    unclipped: a user with m windows moves the sum by up to mC."""

    def step(
        self,
        model: nn.Module,
        data: list[torch.Tensor],
        config: userdp.UserLevelSGD,
        batches: RandomSource,
        noise: RandomSource,
    ) -> torch.Tensor:
        sampled = np.flatnonzero(batches.random(len(data)) < config.sample_rate)
        size = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = torch.zeros(size)
        for u in sampled:
            windows = userdp._pick(data[u], config.windows_per_user, batches)
            each = torch.stack([userdp.user_gradient(model, window[None]) for window in windows])
            total += userdp.clip_rows(each, config.clip).sum(dim=0)
        gaussian = torch.from_numpy(noise.standard_normal(size)).to(total.dtype)
        return (total + config.noise_multiplier * config.clip * gaussian) / (
            config.sample_rate * userdp.divisor_users(config, data)
        )


def _registered(name: str, built_in: str, mechanism: DPMixMin | OpacusMechanism | UserDPSGDMechanism) -> tuple:
    """``mechanism`` registered as ``verify.<name>``, audited where the release runs ``built_in``."""
    registered = f"verify.{name.replace('_', '-')}"
    register_mechanism(registered, mechanism, replace=True)
    return ((built_in, registered),)


def _learner(name: str, description: str, privatiser: learner.Privatiser) -> Variant:
    """A learner mutant: its DP step in the probe fits, and in the audits of the learner."""
    audited = _registered(name, "dpmixmin", DPMixMin(privatiser))
    return Variant(name, description, privatiser=privatiser, audited=audited, breaks=frozenset({LEARNER}))


def _dpsgd(
    name: str,
    description: str,
    built_in: str,
    mechanism: OpacusMechanism | UserDPSGDMechanism,
    once: type[OpacusCanaryRun] | None = None,
) -> Variant:
    """A DP-SGD mutant: audited in place of the pipeline's ``built_in`` DP-SGD (and, where the
    break reaches the one-run canaries, ``once`` trains in its one-run check)."""
    part = OPACUS if built_in == "opacus" else USER_DPSGD
    return Variant(
        name,
        description,
        audited=_registered(name, built_in, mechanism),
        one_run=() if once is None else ((built_in, once),),
        breaks=frozenset({part}),
    )


accounting.register_accountant(HalfStepsPLD.name, HalfStepsPLD(), replace=True)
accounting.register_accountant(PRVLowerEstimate.name, PRVLowerEstimate(), replace=True)

MUTANTS: tuple[Variant, ...] = (
    Variant(
        "sigma_halved",
        "the learner adds half the calibrated noise",
        lambda e, d, q, t, a: _calibrated(e, d, q, t, a) / 2,
        breaks=frozenset({WIRING}),
    ),
    Variant(
        "q_under_reported",
        "the accountant is told q/2 while the learner samples at q",
        lambda e, d, q, t, a: _calibrated(e, d, q / 2, t, a),
        breaks=frozenset({WIRING}),
    ),
    Variant(
        "steps_under_counted",
        "the accountant is told T/2 steps while the learner runs T",
        lambda e, d, q, t, a: _calibrated(e, d, q, max(1, t // 2), a),
        breaks=frozenset({WIRING}),
    ),
    _learner(
        "clipping_disabled", "per-example gradients are not clipped", learner.Privatiser(clip_weights=_no_clipping)
    ),
    _learner(
        "loose_clipping",
        f"gradients are clipped at {LOOSE_CLIP_FACTOR:g}C while noise and accountant assume C",
        learner.Privatiser(clip_weights=_loose_clipping),
    ),
    _learner(
        "realised_normaliser",
        "the noisy sum is divided by the realised batch size, not qn",
        learner.Privatiser(normaliser=_realised_normaliser),
    ),
    _learner(
        "partial_noise",
        "noise is added to only the first half of the k coordinates",
        learner.Privatiser(noise_scale=_half_noise),
    ),
    Variant(
        "sigma_eff_told",
        "the accountant is told AdaClip's σ_eff > σ while the learner adds σ (Opacus PR #807)",
        lambda e, d, q, t, a: _adaclip_sigma(_calibrated(e, d, q, t, a)),
        breaks=frozenset({WIRING}),
    ),
    Variant(
        "prv_lower_estimate",
        "the PRV accountant reports ε − 2·eps_error, unclamped: negative where ε is tiny (Opacus #585/#844)",
        accountants=(("prv", PRVLowerEstimate.name),),
        breaks=frozenset({ACCOUNTANT}),
    ),
    Variant(
        "pld_half_steps",
        "the PLD accountant composes T/2 steps instead of T",
        accountants=(("pld", HalfStepsPLD.name),),
        breaks=frozenset({ACCOUNTANT}),
    ),
    _dpsgd(
        "opacus_sigma_halved",
        "the Opacus optimizer adds half the noise it was made private with",
        "opacus",
        OpacusMechanism(HalfNoiseOpacus),
        HalfNoiseOpacusOnce,
    ),
    _dpsgd(
        "fixed_size_batches",
        "the Opacus DP-SGD takes shuffled fixed-size batches while the accountant assumes Poisson",
        "opacus",
        OpacusMechanism(FixedSizeBatchesOpacus),
    ),
    _dpsgd(
        "per_window_clipping",
        "user-level DP-SGD clips each window, not each user's summed gradient",
        "user-dpsgd",
        UserDPSGDMechanism(PerWindowUserDPSGD),
    ),
)
