"""Calibration: the smallest σ whose ε under an accountant is within a target, searched (or the
accountant's own calibrate, held to its own ε), remembered on disk as hints the accountant must
confirm (:mod:`..calibrations`), and given up after CALIBRATE_SECONDS naming the setting."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..base import calibrations
from ..base.errors import InputError, is_real, require
from ..base.resources import BOUNDED_SECONDS, bounded_all
from .accountants import ACCOUNTANTS, check_accountant, epsilon, epsilon_each, known_epsilon
from .answers import EPSILONS, SIGMAS
from .gdp import gdp_mu_of_epsilon
from .phases import (
    BUILTIN_ACCOUNTANTS,
    DEFAULT_ACCOUNTANT,
    MAX_NOISE_MULTIPLIER,
    GaussianPhase,
    check_delta,
    check_epsilon,
)

#: calibration gives up after this long, naming the setting, instead of hanging.
CALIBRATE_SECONDS = 180.0
#: the log of the largest float: a secant σ beyond it is +inf (and then far past MAX_NOISE_MULTIPLIER).
LOG_FLOAT_MAX = math.log(sys.float_info.max)


def calibrate(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = DEFAULT_ACCOUNTANT,
    *,
    rel_tol: float = 1e-3,
    prior: tuple[GaussianPhase, ...] = (),
) -> float:
    """The smallest σ (to ``rel_tol``) with ε(σ) ≤ target: the returned σ never overshoots ε.

    Each answer is kept (experiments and verification ask for the same σ again and again; a PLD
    calibration under Poisson sampling takes seconds) until the registered accountants change.

    Args:
      target_epsilon: the ε the phases may spend, in (0, 100].
      delta: δ, in (0, 1).
      sample_rate: q of the calibrated phase.
      steps: T of the calibrated phase.
      accountant: the accountant asked (default PLD; a registered name).
      rel_tol: how close to the smallest such σ the search stops.
      prior: phases run first on the same data (sequential composition): σ is then for the
        last phase, so that all of them together spend at most the target.

    Returns:
      σ for the last phase.

    Raises:
      InputError: a request out of range, or an accountant's own failure (one line naming it).
    """
    return calibrate_each([(target_epsilon, delta, sample_rate, steps, accountant)], rel_tol=rel_tol, prior=prior)[0]


#: a checked calibration request: (ε, δ, q, T, accountant, rel_tol, prior), as :func:`_calibrate` takes it.
Calibration = tuple[float, float, float, int, str, float, tuple[GaussianPhase, ...]]


#: what :func:`calibrate_each` is asked: (target ε, δ, q, T, accountant).
CalibrationRequest = tuple[float, float, float, int, str]


def calibrate_each(
    requests: Sequence[CalibrationRequest],
    *,
    rel_tol: float = 1e-3,
    prior: Sequence[GaussianPhase] = (),
) -> list[float]:
    """:func:`calibrate` of each ``(target_epsilon, delta, sample_rate, steps, accountant)``
    request. Those not already answered in this process run side by side, each search in its own
    :func:`~.resources.bounded_all` child (a search is a sequence of accountant calls), and their
    σ, with the ε each spends, are kept here as if found here; list the slow ones first."""
    require(all(isinstance(p, GaussianPhase) for p in prior), f"prior must be GaussianPhase values, got {prior!r}")
    asked: list[Calibration] = []
    for eps, delta, q, steps, accountant in requests:
        check_epsilon(eps)
        check_delta(delta)
        check_accountant(accountant)
        GaussianPhase(1.0, q, steps)  # validates q and T
        asked.append((float(eps), float(delta), float(q), int(steps), accountant, rel_tol, tuple(prior)))
    missing = [key for key in dict.fromkeys(asked) if SIGMAS.get(key) is None]
    if len(missing) > 1:
        found = bounded_all(
            _calibrated,
            missing,
            what=[
                f"calibrating epsilon {k[0]:g} at delta {k[1]:g}, q = {k[2]:g}, T = {k[3]} with {k[4]}" for k in missing
            ],
            seconds=CALIBRATE_SECONDS + BOUNDED_SECONDS,
        )
        for key, (sigma, spent) in zip(missing, found, strict=True):
            SIGMAS.put(key, float(sigma))
            EPSILONS.put(_spent(key, float(sigma)), float(spent))
    return [_calibrate(key) for key in asked]


def _calibrated(*key: Any) -> tuple[float, float]:
    """A :func:`calibrate_each` child's answer: σ, and the ε it spends (known from the search)."""
    sigma = _calibrate(key)  # bounded_all hands the fields of a Calibration
    return sigma, known_epsilon(*_spent(key, sigma))


def _calibrate(key: Calibration) -> float:
    """:func:`calibrate` of a checked request, once per process."""
    known = SIGMAS.get(key)
    return known if known is not None else SIGMAS.put(key, calibrate_afresh(*key))


def _spent(key: Calibration, sigma: float) -> tuple[tuple[GaussianPhase, ...], float, str]:
    """The ε request of a calibration's answer: the prior phases, then σ's, at its δ and accountant."""
    return (*key[6], GaussianPhase(sigma, key[2], key[3])), key[1], key[4]


def calibrate_afresh(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str,
    rel_tol: float,
    prior: tuple[GaussianPhase, ...],
) -> float:
    own = getattr(ACCOUNTANTS.get(accountant), "calibrate", None)
    if own is not None:
        return _checked_calibration(
            own,
            target_epsilon,
            delta=delta,
            sample_rate=sample_rate,
            steps=steps,
            accountant=accountant,
            prior=prior,
        )
    if prior:
        spent = epsilon(prior, delta, accountant)
        require(spent < target_epsilon, f"the earlier phases already spend ε = {spent:.4g} of {target_epsilon:g}")

    deadline = time.monotonic() + CALIBRATE_SECONDS

    def excess(sigma: float) -> float:
        require(
            time.monotonic() < deadline,
            f"calibrating epsilon {target_epsilon:g} at delta {delta:g}, q = "
            f"{sample_rate:g}, T = {steps} with the {accountant} accountant did not finish in "
            f"{CALIBRATE_SECONDS:g} s (near sigma {sigma:.3g}); a larger q or fewer steps calibrate faster",
        )
        return epsilon([*prior, GaussianPhase(sigma, sample_rate, steps)], delta, accountant) - target_epsilon

    request = {
        "epsilon": target_epsilon,
        "delta": delta,
        "sample_rate": sample_rate,
        "steps": steps,
        "accountant": accountant,
        "rel_tol": rel_tol,
        "prior": [[p.noise_multiplier, p.sample_rate, p.steps] for p in prior],
    }
    remembered = calibrations.hint(request) if accountant in BUILTIN_ACCOUNTANTS else None
    # A remembered σ is used only if this accountant confirms it: within the target, and minimal
    # to rel_tol (a σ one tolerance smaller overshoots); both asked at once. Else, or with none,
    # calibrate afresh.
    if remembered is not None:
        candidates = [(*prior, GaussianPhase(s, sample_rate, steps)) for s in (remembered, remembered / (1 + rel_tol))]
        spent, smaller = epsilon_each([(phases, delta, accountant) for phases in candidates])
        if spent <= target_epsilon < smaller:
            return remembered
    sigma = search(
        excess,
        target_epsilon,
        delta=delta,
        sample_rate=sample_rate,
        steps=steps,
        accountant=accountant,
        rel_tol=rel_tol,
    )
    if accountant in BUILTIN_ACCOUNTANTS:
        calibrations.remember(request, sigma)
    return sigma


def search(
    excess: Callable[[float], float],
    target_epsilon: float,
    *,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str,
    rel_tol: float,
) -> float:
    """The smallest σ with ``excess(σ)`` ≤ 0, to rel_tol: the σ returned has excess ≤ 0 and one
    at most a factor 1 + rel_tol below it has excess > 0. Each next σ is where the line through the
    last two points (log ε against log σ, nearly straight: ε falls about as 1/σ) meets the target,
    first beyond it to bracket the root, then inside the bracket (PLD calls take seconds under
    Poisson sampling: this asks a third fewer than a bracket of fixed steps and Brent's method did)."""
    # Bracket in the accountant itself (no other accountant's floor limits the reachable ε),
    # from a start that is exact for full batch and close under Poisson sampling.
    sigma = start_sigma(target_epsilon, delta, sample_rate, steps)
    require(
        sigma <= MAX_NOISE_MULTIPLIER,
        f"epsilon {target_epsilon:g} at delta {delta:g} over {steps} steps needs a "
        f"noise multiplier of about {sigma:.3g}, above the largest accepted ({MAX_NOISE_MULTIPLIER:g})",
    )
    seen = [(sigma, excess(sigma))]
    climbs = 0
    while seen[-1][1] > 0:  # climb: the root is above every σ seen
        climbs += 1
        top = seen[-1][0]
        # After a few steps up, one look at the top: an unreachable ε is refused without the long
        # climb (a reachable one is within three steps of the start; the top can take seconds).
        if top >= MAX_NOISE_MULTIPLIER or (climbs == 3 and excess(MAX_NOISE_MULTIPLIER) > 0):
            floor = excess(MAX_NOISE_MULTIPLIER) + target_epsilon
            raise InputError(
                f"the {accountant} accountant cannot certify epsilon {target_epsilon:g} at delta {delta:g}: even "
                f"noise multiplier {MAX_NOISE_MULTIPLIER:g} gives epsilon {floor:.4g} (its conversion to "
                f"(epsilon, delta) has that floor); try "
                + " or ".join(a for a in ACCOUNTANTS.names() if a != accountant)
            )
        sigma = min(top * _bracket_step(seen, target_epsilon, rel_tol), MAX_NOISE_MULTIPLIER)
        seen.append((sigma, excess(sigma)))
    while all(e <= 0 for _, e in seen):  # descend: the root is below every σ seen
        bottom = seen[-1][0]
        require(
            bottom > 1e-3,
            f"the {accountant} accountant gives epsilon <= {target_epsilon:g} even at noise "
            f"multiplier 1e-3: the target is beyond what it resolves",
        )
        sigma = bottom / _bracket_step(seen, target_epsilon, rel_tol)
        seen.append((sigma, excess(sigma)))
    # The bracket: the largest σ seen whose ε is over the target and the smallest within it. Each
    # step keeps one of each and narrows it, by halving it (in log σ) when the line has moved the
    # same end three times in a row (creeping).
    over = max((s, e) for s, e in seen if e > 0)
    within = min((s, e) for s, e in seen if e <= 0)
    moved: list[bool] = []  # whether each step moved the end over the target
    while within[0] > over[0] * (1 + rel_tol) * (1 + 1e-12):
        stuck = len(moved) > 2 and moved[-1] == moved[-2] == moved[-3]
        sigma = math.sqrt(over[0] * within[0]) if stuck else _inside(over, within, seen[-2:], target_epsilon, rel_tol)
        seen.append((sigma, excess(sigma)))
        moved.append(seen[-1][1] > 0)
        over, within = (seen[-1], within) if moved[-1] else (over, seen[-1])
    return float(within[0])


def _secant_sigma(a: tuple[float, float], b: tuple[float, float], target_epsilon: float) -> float | None:
    """Where the line through two (σ, excess) points, as log ε against log σ, meets the target;
    None when they do not define a falling line (equal ε, or ε ≤ 0)."""
    (s_a, e_a), (s_b, e_b) = a, b
    eps_a, eps_b = e_a + target_epsilon, e_b + target_epsilon
    if min(eps_a, eps_b) <= 0 or s_a == s_b or eps_a == eps_b:
        return None
    slope = (math.log(eps_b) - math.log(eps_a)) / (math.log(s_b) - math.log(s_a))
    if not slope < 0:
        return None
    log_sigma = math.log(s_a) + (math.log(target_epsilon) - math.log(eps_a)) / slope
    return math.exp(log_sigma) if log_sigma < LOG_FLOAT_MAX else math.inf  # ε = 1e-300: σ past every float


def _bracket_step(seen: list[tuple[float, float]], target_epsilon: float, rel_tol: float) -> float:
    """The factor (> 1) to step σ by, away from the last point seen, towards the root and 10% of
    the way further (to get past it): from the last two points' line, or ε ∝ 1/σ from one."""
    sigma, e = seen[-1]
    guess = _secant_sigma(seen[-2], seen[-1], target_epsilon) if len(seen) > 1 else None
    if guess is None and e + target_epsilon > 0:
        guess = sigma * (e + target_epsilon) / target_epsilon
    ratio = 1.5 if guess is None else min(max(guess / sigma, sigma / guess), 1.5) ** 1.1  # capped first: no overflow
    return min(max(ratio, 1 + rel_tol / 4), 1.5)


def _inside(
    over: tuple[float, float],
    within: tuple[float, float],
    last: list[tuple[float, float]],
    target_epsilon: float,
    rel_tol: float,
) -> float:
    """The next σ inside the bracket from ``over`` (ε over the target) to ``within`` (ε within
    it): the root of the line through the ``last`` two points (the nearest to the root so far),
    pushed a quarter tolerance up so that it most likely lands just above the root, and its
    neighbour a tolerance below then closes the bracket; kept a quarter tolerance from either end;
    the geometric middle when the line says nothing."""
    low, high, margin = over[0], within[0], 1 + rel_tol / 4
    guess = _secant_sigma(last[0], last[1], target_epsilon)
    if guess is None or not low < guess < high * margin:
        return math.sqrt(low * high)
    if guess * margin >= high / margin:  # the root is within a tolerance below high: test there
        return max(high / (1 + rel_tol), low * margin)
    return min(max(guess * margin, low * margin), high / margin)


def _checked_calibration(
    own: Callable[..., float],
    target_epsilon: float,
    *,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str,
    prior: tuple[GaussianPhase, ...],
) -> float:
    """An accountant's own calibration, held to its own ``epsilon``: a σ that overshoots the
    target (or is no σ) is an error, never a claim."""
    sigma = own(target_epsilon, delta, sample_rate, steps, prior)
    require(
        is_real(sigma) and 0 < sigma <= MAX_NOISE_MULTIPLIER,
        f"the {accountant} accountant's calibrate returned {sigma!r}: not a noise multiplier in "
        f"(0, {MAX_NOISE_MULTIPLIER:g}]",
    )
    spent = epsilon([*prior, GaussianPhase(float(sigma), sample_rate, steps)], delta, accountant)
    require(
        spent <= target_epsilon * (1 + 1e-9),
        f"the {accountant} accountant's calibrate returned sigma {sigma:.6g}, whose epsilon by its own epsilon() "
        f"is {spent:.6g}, above the target {target_epsilon:g}",
    )
    return float(sigma)


def start_sigma(target_epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    """σ from the Gaussian-DP view: exact for full batch (μ = √T/σ), and for Poisson sampling the
    central-limit μ ≈ q√(T(e^{1/σ²} − 1)) (Bu et al. 2020, Thm 5) solved for σ. Only a start."""
    mu = gdp_mu_of_epsilon(target_epsilon, delta)
    if sample_rate == 1.0:
        return float(np.sqrt(steps) / mu)
    return float(1 / np.sqrt(np.log1p((mu / (sample_rate * np.sqrt(steps))) ** 2)))
