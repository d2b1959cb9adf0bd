"""Accounting (DESIGN §5): ε of (subsampled) Gaussian mechanisms from registered accountants.

Every ε we claim comes from an accountant in :data:`ACCOUNTANTS`: the built-ins are opacus
(`rdp`, `prv`) and Google dp_accounting (`pld`); a user adds their own with
:func:`register_accountant` (an object with ``name`` and ``epsilon(phases, delta)``, and
optionally ``calibrate``), and every place that takes an accountant's name accepts it. The analytic
Gaussian-DP formula for full batch is here only as an independent check (Dong, Roth & Su 2019,
Cor. 2.13: T-fold composition of a Gaussian with noise multiplier σ is μ-GDP with μ = √T/σ).
The neighbouring relation is add/remove of one example (or one user).
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from . import calibrations
from .errors import InputError, is_real, require
from .registry import Registry
from .resources import BOUNDED_SECONDS, bounded, bounded_all
from .specfile import check_fields

if TYPE_CHECKING:
    import dp_accounting

# dp_accounting and opacus (which loads torch) are imported where they are used: together they
# take seconds, and commands like `bound` never need them.

#: the library accountants this package registers (and cross-checks against each other).
BUILTIN_ACCOUNTANTS = ("rdp", "prv", "pld")
#: the largest ε we calibrate for: beyond it a guarantee means little, and the PLD accountant's
#: time and memory grow with ε (ε = 50 already takes ~17 s and 0.7 GB for a single step).
MAX_EPSILON = 100.0
#: the largest σ accepted: ε is already at every accountant's floor far below it, and the
#: libraries overflow or fail their own checks on much larger values (opacus at 1e8, q = 0.01).
MAX_NOISE_MULTIPLIER = 1e6
#: the most steps one phase may take: far beyond any training run here, and the accountants'
#: memory grows with T (opacus' RDP/PRV history, 1e9 steps asked for petabytes).
MAX_STEPS = 1_000_000
#: the smallest sampling rate accepted: as q → 0 the calibrated σ shrinks and the accountants'
#: discretisation grows without bound (q = 1e-6 already takes ~30 s to calibrate, 1e-9 hours).
MIN_SAMPLE_RATE = 1e-6
#: calibration gives up after this long, naming the setting, instead of hanging.
CALIBRATE_SECONDS = 180.0
#: the accountant used to calibrate σ for a release (a pessimistic PLD bound).
DEFAULT_ACCOUNTANT = "pld"


@dataclass(frozen=True)
class GaussianPhase:
    """T steps of the (Poisson-subsampled, rate q) Gaussian mechanism with multiplier σ."""

    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        check_fields(self)
        require(
            0 < self.noise_multiplier <= MAX_NOISE_MULTIPLIER,
            f"noise multiplier must be in (0, {MAX_NOISE_MULTIPLIER:g}], got {self.noise_multiplier}",
        )
        require(
            MIN_SAMPLE_RATE <= self.sample_rate <= 1,
            f"sample rate q must be in [{MIN_SAMPLE_RATE:g}, 1] "
            f"(below it no accountant answers in reasonable time), got {self.sample_rate}",
        )
        require(1 <= self.steps <= MAX_STEPS, f"steps T must be in [1, {MAX_STEPS:,}], got {self.steps}")


def check_epsilon(epsilon: float) -> None:
    require(
        is_real(epsilon) and 0 < epsilon <= MAX_EPSILON,
        f"epsilon must be in (0, {MAX_EPSILON:g}], got {epsilon!r}",
    )


def check_delta(delta: float) -> None:
    require(is_real(delta) and 0 < delta < 1, f"delta must be in (0, 1), got {delta!r}")


def _pld_accountant(
    phases: Sequence[GaussianPhase], interval: float | None = None, replace_one: bool = False
) -> dp_accounting.pld.PLDAccountant:
    """dp_accounting's PLD of ``phases``; ``interval`` is its value discretisation (coarser is
    faster and stays pessimistic), its default when None; ``replace_one`` accounts under
    replace-one neighbouring (a Gaussian's sensitivity is then 2C), not add/remove."""
    import dp_accounting

    options: dict[str, Any] = {} if interval is None else {"value_discretization_interval": interval}
    if replace_one:
        options["neighboring_relation"] = dp_accounting.NeighboringRelation.REPLACE_ONE
    pld = dp_accounting.pld.PLDAccountant(**options)
    pld.compose(dp_accounting.ComposedDpEvent([_pld_event(p) for p in phases]))
    return pld


def _pld_event(phase: GaussianPhase) -> dp_accounting.DpEvent:
    import dp_accounting

    event: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(phase.noise_multiplier)
    if phase.sample_rate < 1:
        event = dp_accounting.PoissonSampledDpEvent(phase.sample_rate, event)
    return dp_accounting.SelfComposedDpEvent(event, phase.steps)


@runtime_checkable
class Accountant(Protocol):
    """What an accountant gives: ε at δ of the sequential composition of Gaussian phases. It may
    also have ``calibrate(target_epsilon, delta, sample_rate, steps, prior) -> σ``; without one,
    :func:`calibrate` searches σ with its ``epsilon``."""

    @property
    def name(self) -> str: ...

    def epsilon(self, phases: Sequence[GaussianPhase], delta: float) -> float: ...


@dataclass(frozen=True)
class LibraryAccountant:
    """opacus' ``rdp`` or ``prv``, or dp_accounting's ``pld``, each asked in a
    :func:`~.resources.bounded` child (a degenerate request cannot take the machine's memory)."""

    name: str

    def epsilon(self, phases: Sequence[GaussianPhase], delta: float) -> float:
        return _library_epsilons([(tuple(phases), delta, self.name)])[0]


def _check_accountant(name: str, obj: Accountant) -> None:
    require(
        isinstance(obj, Accountant) and callable(getattr(obj, "epsilon", None)),
        f"an accountant needs a name and an epsilon(phases, delta) method, got {obj!r}",
    )
    require(obj.name == name, f"the accountant's name is {obj.name!r}, registered as {name!r}")
    calibrator = getattr(obj, "calibrate", None)
    require(calibrator is None or callable(calibrator), f"accountant {name!r}: calibrate must be a method")


#: every accountant a spec, a flag or a call may name: the built-ins and the user's own.
ACCOUNTANTS: Registry[Accountant] = Registry("accountant", "accountants", _check_accountant)


def register_accountant(obj: Accountant, *, replace: bool = False) -> Accountant:
    """Make ``obj`` (``obj.name``, ``obj.epsilon(phases, delta)``) an accountant every command and
    call accepts by its name; ``replace`` replaces one already registered under that name."""
    return ACCOUNTANTS.register(getattr(obj, "name", None), obj, replace=replace)  # type: ignore[arg-type]


def check_accountant(name: str) -> None:
    """An :class:`InputError` (a ValueError) naming the known accountants, unless ``name`` is one."""
    ACCOUNTANTS.get(name)


def epsilon(phases: Sequence[GaussianPhase], delta: float, accountant: str = DEFAULT_ACCOUNTANT) -> float:
    """ε at ``delta`` of the sequential composition of ``phases`` under ``accountant``."""
    check_delta(delta)
    check_accountant(accountant)
    require(len(phases) >= 1, "nothing to account")
    _check_phases(phases)
    with _library_failures(accountant, list(phases), delta):
        return _epsilon(tuple(phases), float(delta), accountant)


@contextmanager
def _library_failures(accountant: str, asked: object, delta: float) -> Iterator[None]:
    """A library's own numeric failure (ValueError, ArithmeticError) as one InputError line,
    not a traceback."""
    try:
        yield
    except InputError:
        raise
    except (ValueError, ArithmeticError) as exc:
        raise InputError(f"the {accountant} accountant failed on {asked} at delta {delta:g}: {exc}") from None


class _Answers:
    """Answers kept in this process by request, at most ``size`` (the oldest dropped first),
    until the registered accountants change; unlike an lru_cache, it also takes the answers that
    :func:`epsilon_each` and :func:`calibrate_each` got from their children."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: dict[Any, float] = {}
        self._lock = threading.Lock()
        # a bounded child forked while another thread held the lock would wait for it forever
        os.register_at_fork(after_in_child=self._unlock)

    def _unlock(self) -> None:
        self._lock = threading.Lock()

    def get(self, key: Any) -> float | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: Any, value: float) -> float:
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.size:
                del self._entries[next(iter(self._entries))]
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


#: ε by (phases, δ, accountant), and σ by calibration request (:func:`_calibrate`'s arguments).
_EPSILONS = _Answers(4096)
_SIGMAS = _Answers(1024)


def _epsilon(phases: tuple[GaussianPhase, ...], delta: float, accountant: str) -> float:
    """:func:`epsilon` once per request (an audit asks the same of every result, calibration of
    every σ it tries twice)."""
    known = _EPSILONS.get((phases, delta, accountant))
    if known is not None:
        return known
    value = _checked_epsilon(ACCOUNTANTS.get(accountant).epsilon(phases, delta), phases, delta, accountant)
    return _EPSILONS.put((phases, delta, accountant), value)


def _checked_epsilon(value: object, phases: Sequence[GaussianPhase], delta: float, accountant: str) -> float:
    """An accountant's answer as an ε: one that is no ε ≥ 0 (NaN, negative, not a number) is
    refused, never passed on."""
    number = float(value) if is_real(value) else math.nan  # type: ignore[arg-type]
    require(
        not math.isnan(number) and number >= 0,
        f"the {accountant} accountant returned {value!r} for {list(phases)} at delta {delta:g}: not an epsilon >= 0",
    )
    return number


def epsilon_each(requests: Sequence[tuple[Sequence[GaussianPhase], float, str]]) -> list[float]:
    """:func:`epsilon` of each ``(phases, delta, accountant)`` request. The library accountants'
    are answered side by side (:func:`~.resources.bounded_all`: one child per CPU), each distinct
    request not already answered in this process once; an accountant of the user's is asked one
    request at a time."""
    asked = []
    for phases, delta, accountant in requests:
        check_accountant(accountant)
        asked.append((*_request(phases, delta), accountant))
    distinct = [r for r in dict.fromkeys(asked) if _EPSILONS.get(r) is None]
    library = [r for r in distinct if isinstance(ACCOUNTANTS.get(r[2]), LibraryAccountant)]
    try:
        values = _library_epsilons(library) if library else []
        for v, r in zip(values, library, strict=True):
            _EPSILONS.put(r, _checked_epsilon(v, *r))
    except (ValueError, ArithmeticError) as exc:  # a library's failure: asked alone, so it is named
        if isinstance(exc, InputError):
            raise
    return [epsilon(*r) for r in asked]  # each now known, but for the failure asked again and the user's


def _library_epsilons(requests: Sequence[tuple[tuple[GaussianPhase, ...], float, str]]) -> list[float]:
    """Library accountants' answers to checked requests, each in a guarded child, side by side."""
    import dp_accounting  # noqa: F401  (loaded here, so each bounded child finds it loaded)

    if any(accountant in ("rdp", "prv") for _, _, accountant in requests):
        import opacus.accountants  # noqa: F401
    values = bounded_all(
        _library_epsilon,
        requests,
        what=[_what(accountant, phases, delta) for phases, delta, accountant in requests],
        errors=(DegenerateRequest,),
    )
    return [float(v) for v in values]


def clear_caches() -> None:
    """Forget every cached answer: what verify-accountant calls around a mutant, and what any
    change to the registered accountants triggers, so that no answer outlives its accountant."""
    _EPSILONS.clear()
    _SIGMAS.clear()
    for cached_function in (_optimistic, _replace_one_epsilon, _profile_curve):
        cached_function.cache_clear()


def _check_phases(phases: Sequence[GaussianPhase]) -> None:
    """Every phase a GaussianPhase; and dp_accounting imported here, in the parent, so that each
    :func:`~.resources.bounded` child finds it loaded instead of importing it anew."""
    import dp_accounting  # noqa: F401

    require(
        all(isinstance(p, GaussianPhase) for p in phases),
        f"phases must be GaussianPhase(noise_multiplier, sample_rate, steps) values, got {list(phases)!r}",
    )


def _request(phases: Sequence[GaussianPhase], delta: float) -> tuple[tuple[GaussianPhase, ...], float]:
    """A checked request (δ, at least one phase, every phase a GaussianPhase), as a cache key."""
    check_delta(delta)
    require(len(phases) >= 1, "nothing to account")
    _check_phases(phases)
    return tuple(phases), float(delta)


def _what(accountant: str, phases: Sequence[GaussianPhase], delta: float) -> str:
    """A request, as a refusal names it."""
    steps = "; ".join(f"sigma {p.noise_multiplier:g}, q {p.sample_rate:g}, T {p.steps}" for p in phases)
    return f"the {accountant} accountant on {steps} at delta {delta:g}"


#: a request whose RDP ε (an upper bound, within a small factor of the truth for Gaussians) is
#: above this is refused by the PLD and PRV accountants: its noise is far too small to mean
#: anything, and their discretised loss distributions grow without bound (σ = 0.01 asked 26 GiB).
DEGENERATE_EPSILON = 10 * MAX_EPSILON
#: the δ at which a privacy profile's request is checked for it.
DEGENERATE_DELTA = 1e-5


class DegenerateRequest(InputError):
    """A mechanism so leaky that the PLD and PRV accountants would not finish (ε far above 100)."""


def _refuse_degenerate(phases: Sequence[GaussianPhase], delta: float, accountant: str) -> None:
    """Raise :class:`DegenerateRequest` when dp_accounting's RDP (fast, small) gives ε above
    DEGENERATE_EPSILON: only then would a discretised accountant's memory and time explode. The
    full-batch GDP ε (analytic) screens first: it bounds every q's ε from above."""
    full_batch_mu = float(np.sqrt(sum(p.steps / p.noise_multiplier**2 for p in phases)))
    if gdp_epsilon_of_mu(full_batch_mu, delta) <= DEGENERATE_EPSILON:
        return  # exact for full batch, and Poisson sampling only lowers ε: no RDP needed
    rough = _google_rdp(phases, delta)
    if rough > DEGENERATE_EPSILON:
        raise DegenerateRequest(
            f"refused: {_what(accountant, phases, delta)}: its RDP epsilon is {rough:.4g}, above "
            f"{DEGENERATE_EPSILON:g} (the noise is far too small to mean anything, and the accountant's memory "
            "would grow without bound)"
        )


def _library_epsilon(phases: Sequence[GaussianPhase], delta: float, accountant: str) -> float:
    if accountant != "rdp":
        _refuse_degenerate(phases, delta, accountant)
    if accountant == "pld":
        return float(_pld_accountant(phases).get_epsilon(delta))
    from opacus.accountants import PRVAccountant, RDPAccountant  # loads torch: only when asked for

    opacus_acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    opacus_acc.history = [(p.noise_multiplier, p.sample_rate, p.steps) for p in phases]
    # opacus' PRV takes log(1 − q) = −inf at q = 1 (harmless), and RDP warns when the best order
    # is the largest it tries (a looser, still valid bound): neither is for our users' eyes.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", UserWarning)
        return float(opacus_acc.get_epsilon(delta))


def pld_epsilon(phases: Sequence[GaussianPhase], delta: float, *, replace_one: bool = False) -> float:
    """ε at ``delta`` from dp_accounting's PLD under add/remove neighbouring (the ``pld``
    accountant) or, ``replace_one``, under replace-one (where a Gaussian's sensitivity is 2C):
    the yardstick a user's own accountant is checked against (:mod:`.testing`)."""
    if not replace_one:
        return epsilon(phases, delta, "pld")
    return _replace_one_epsilon(*_request(phases, delta))


@lru_cache(maxsize=1024)
def _replace_one_epsilon(phases: tuple[GaussianPhase, ...], delta: float) -> float:
    what = _what("pld (replace-one)", phases, delta)
    return bounded(_replace_one_pld, phases, delta, what=what, errors=(DegenerateRequest,))


def _replace_one_pld(phases: Sequence[GaussianPhase], delta: float) -> float:
    _refuse_degenerate(phases, delta, "pld")
    return float(_pld_accountant(phases, replace_one=True).get_epsilon(delta))


def google_rdp_epsilon(phases: Sequence[GaussianPhase], delta: float) -> float:
    """ε from dp_accounting's RDP accountant: a second, independent RDP implementation to check
    opacus' against (it logs a warning per order it drops; those are silenced)."""
    check_delta(delta)
    _check_phases(phases)
    return bounded(_google_rdp, phases, delta, what=_what("dp_accounting rdp", phases, delta))


def _google_rdp(phases: Sequence[GaussianPhase], delta: float) -> float:
    import dp_accounting
    from absl import logging as absl_logging

    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        accountant = dp_accounting.rdp.RdpAccountant()
        accountant.compose(dp_accounting.ComposedDpEvent([_pld_event(p) for p in phases]))
        return float(accountant.get_epsilon(delta))
    finally:
        absl_logging.set_verbosity(verbosity)


def epsilons(phases: Sequence[GaussianPhase], delta: float) -> dict[str, float]:
    """ε under every built-in (library) accountant, keyed by name: their cross-check."""
    return dict(
        zip(BUILTIN_ACCOUNTANTS, epsilon_each([(phases, delta, name) for name in BUILTIN_ACCOUNTANTS]), strict=True)
    )


def calibrate(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = DEFAULT_ACCOUNTANT,
    rel_tol: float = 1e-3,
    prior: tuple[GaussianPhase, ...] = (),
) -> float:
    """The smallest σ (to ``rel_tol``) with ε(σ) ≤ target: the returned σ never overshoots ε.

    ``prior`` phases run first on the same data (sequential composition): σ is then for the
    last phase, so that all of them together spend at most the target. Each answer is kept
    (experiments and verification ask for the same σ again and again; a PLD calibration under
    Poisson sampling takes seconds) until the registered accountants change.
    """
    return calibrate_each([(target_epsilon, delta, sample_rate, steps, accountant)], rel_tol, prior)[0]


#: a checked calibration request: (ε, δ, q, T, accountant, rel_tol, prior), as :func:`_calibrate` takes it.
Calibration = tuple[float, float, float, int, str, float, tuple[GaussianPhase, ...]]


#: what :func:`calibrate_each` is asked: (target ε, δ, q, T, accountant).
CalibrationRequest = tuple[float, float, float, int, str]


def calibrate_each(
    requests: Sequence[CalibrationRequest],
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
    missing = [key for key in dict.fromkeys(asked) if _SIGMAS.get(key) is None]
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
            _SIGMAS.put(key, float(sigma))
            _EPSILONS.put(_spent(key, float(sigma)), float(spent))
    return [_calibrate(key) for key in asked]


def _calibrated(*key: Any) -> tuple[float, float]:
    """A :func:`calibrate_each` child's answer: σ, and the ε it spends (known from the search)."""
    sigma = _calibrate(key)  # bounded_all hands the fields of a Calibration
    return sigma, _epsilon(*_spent(key, sigma))


def _calibrate(key: Calibration) -> float:
    """:func:`calibrate` of a checked request, once per process."""
    known = _SIGMAS.get(key)
    return known if known is not None else _SIGMAS.put(key, _calibrate_afresh(*key))


def _spent(key: Calibration, sigma: float) -> tuple[tuple[GaussianPhase, ...], float, str]:
    """The ε request of a calibration's answer: the prior phases, then σ's, at its δ and accountant."""
    return (*key[6], GaussianPhase(sigma, key[2], key[3])), key[1], key[4]


def _calibrate_afresh(
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
        return _checked_calibration(own, target_epsilon, delta, sample_rate, steps, accountant, prior)
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
    sigma = _search(excess, target_epsilon, delta, sample_rate, steps, accountant, rel_tol)
    if accountant in BUILTIN_ACCOUNTANTS:
        calibrations.remember(request, sigma)
    return sigma


def _search(
    excess: Callable[[float], float],
    target_epsilon: float,
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
    sigma = _start_sigma(target_epsilon, delta, sample_rate, steps)
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
    return math.exp(math.log(s_a) + (math.log(target_epsilon) - math.log(eps_a)) / slope)


def _bracket_step(seen: list[tuple[float, float]], target_epsilon: float, rel_tol: float) -> float:
    """The factor (> 1) to step σ by, away from the last point seen, towards the root and 10% of
    the way further (to get past it): from the last two points' line, or ε ∝ 1/σ from one."""
    sigma, e = seen[-1]
    guess = _secant_sigma(seen[-2], seen[-1], target_epsilon) if len(seen) > 1 else None
    if guess is None and e + target_epsilon > 0:
        guess = sigma * (e + target_epsilon) / target_epsilon
    ratio = 1.5 if guess is None else max(guess / sigma, sigma / guess) ** 1.1
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


def _start_sigma(target_epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    """σ from the Gaussian-DP view: exact for full batch (μ = √T/σ), and for Poisson sampling the
    central-limit μ ≈ q√(T(e^{1/σ²} − 1)) (Bu et al. 2020, Thm 5) solved for σ. Only a start."""
    mu = gdp_mu_of_epsilon(target_epsilon, delta)
    if sample_rate == 1.0:
        return float(np.sqrt(steps) / mu)
    return float(1 / np.sqrt(np.log1p((mu / (sample_rate * np.sqrt(steps))) ** 2)))


def gdp_delta(mu: float, epsilon: float | np.ndarray) -> float | np.ndarray:
    """δ(ε) of μ-GDP (Dong, Roth & Su 2019, Cor. 2.13): Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).

    The second term in the log domain: e^ε Φ(b) overflows for large ε while the product is tiny.
    Tested against dp_accounting's ``GaussianPrivacyLoss`` (a μ-GDP mechanism is a Gaussian with
    sensitivity 1 and noise 1/μ).
    """
    from scipy.special import log_ndtr, ndtr  # Φ and log Φ, on first use: the command line starts without scipy

    eps = np.asarray(epsilon, dtype=float)
    delta = ndtr(-eps / mu + mu / 2) - np.exp(eps + log_ndtr(-eps / mu - mu / 2))
    return float(delta) if np.ndim(delta) == 0 else delta


def gdp_epsilon_of_mu(mu: float, delta: float) -> float:
    """The ε at which a μ-GDP mechanism is (ε, δ)-DP (0 when μ ≤ 0 or δ(0) ≤ δ)."""
    check_delta(delta)
    require(not np.isnan(mu) and mu != np.inf, f"mu must be a number below +inf, got {mu}")
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    high = 1.0
    while gdp_delta(mu, high) > delta:
        high *= 2
    from scipy.optimize import brentq

    return float(brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, high, xtol=1e-12))


def gdp_mu_of_epsilon(epsilon: float, delta: float) -> float:
    """The μ whose μ-GDP curve is (ε, δ)-DP exactly: the GDP claim behind a full-batch (ε, δ)."""
    check_epsilon(epsilon)
    check_delta(delta)
    high = 1.0
    while gdp_delta(high, epsilon) < delta:
        high *= 2
    from scipy.optimize import brentq

    return float(brentq(lambda m: gdp_delta(m, epsilon) - delta, 1e-12, high, xtol=1e-14))


def gdp_epsilon(noise_multiplier: float, steps: int, delta: float) -> float:
    """Exact ε of T full-batch Gaussian steps via μ-GDP, μ = √T/σ (Dong et al., Cor. 2.13)."""
    return gdp_epsilon_of_mu(np.sqrt(steps) / noise_multiplier, delta)


def privacy_profile(phases: Sequence[GaussianPhase], epsilons: np.ndarray) -> np.ndarray:
    """δ(ε) of the composition of ``phases`` on a grid of ε, from dp_accounting's PLD accountant
    (pessimistic: never below the true δ, so a trade-off curve built from it is never above the
    true one)."""
    require(len(phases) >= 1, "nothing to account")
    _check_phases(phases)
    grid = np.asarray(epsilons, dtype=float)

    def compute() -> np.ndarray:
        _refuse_degenerate(phases, DEGENERATE_DELTA, "pld")
        return np.asarray(_pld_accountant(phases).get_delta(grid), dtype=float)

    return bounded(
        compute,
        what=_what("pld", phases, DEGENERATE_DELTA) + " (its privacy profile)",
        errors=(DegenerateRequest,),
    )


#: :func:`optimistic_epsilon` rounds every step's privacy loss down to its grid, so its ε sits
#: at most T·Δ (about T·Δ/2: measured exactly 0.05 at T = 1000, Δ = 1e-4) below the true one; it
#: picks Δ so that this worst case is at most OPTIMISTIC_SHORTFALL of ε, within
#: [OPTIMISTIC_FINEST, OPTIMISTIC_COARSEST] (a few steps at a large ε need no fine grid).
OPTIMISTIC_SHORTFALL = 0.005
OPTIMISTIC_FINEST, OPTIMISTIC_COARSEST = 1e-5, 1e-2
#: the discretisation of the quick pessimistic estimate that sizes Δ (connect-the-dots at 1e-3 is
#: within 0.1% of the accountant's 1e-4 at T = 1000, ten times faster).
QUICK_INTERVAL = 1e-3


def optimistic_epsilon(phases: Sequence[GaussianPhase], delta: float) -> float:
    """ε at ``delta`` from dp_accounting's *optimistic* PLD of ``phases`` (never above the true ε):
    what a lower bound may report as the ε of a mechanism it has shown to be at least that leaky.

    Its grid Δ keeps the rounding shortfall (at most ΣT·Δ) under OPTIMISTIC_SHORTFALL · ε."""
    return _optimistic(*_request(phases, delta))


@lru_cache(maxsize=1024)
def _optimistic(phases: tuple[GaussianPhase, ...], delta: float) -> float:
    return bounded(
        _optimistic_epsilon, phases, delta, what=_what("optimistic pld", phases, delta), errors=(DegenerateRequest,)
    )


def _optimistic_epsilon(phases: Sequence[GaussianPhase], delta: float) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pld

    _refuse_degenerate(phases, delta, "optimistic pld")
    rough = float(_pld_accountant(phases, QUICK_INTERVAL).get_epsilon(delta))
    steps = sum(p.steps for p in phases)
    interval = min(OPTIMISTIC_COARSEST, max(OPTIMISTIC_FINEST, OPTIMISTIC_SHORTFALL * rough / steps))
    losses = [
        pld.from_gaussian_mechanism(
            p.noise_multiplier,
            pessimistic_estimate=False,
            value_discretization_interval=interval,
            sampling_prob=p.sample_rate,
            use_connect_dots=False,  # it supports only the pessimistic estimate
        ).self_compose(p.steps)
        for p in phases
    ]
    composed = losses[0]
    for more in losses[1:]:
        composed = composed.compose(more)
    return float(composed.get_epsilon_for_delta(delta))


def privacy_profile_curve(
    phases: Sequence[GaussianPhase], delta_floor: float, points: int, interval: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A grid of ε from 0 to ε(``delta_floor``) and δ(ε) on it, from one PLD of ``phases``
    (pessimistic, like :func:`privacy_profile`; ``interval`` as in :func:`_pld_accountant`)."""
    require(len(phases) >= 1, "nothing to account")
    _check_phases(phases)
    return _profile_curve(tuple(phases), float(delta_floor), points, interval)


@lru_cache(maxsize=1024)
def _profile_curve(
    phases: tuple[GaussianPhase, ...], delta_floor: float, points: int, interval: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`privacy_profile_curve` once per request (read-only arrays: the cache shares them)."""

    def compute() -> tuple[np.ndarray, np.ndarray]:
        _refuse_degenerate(phases, DEGENERATE_DELTA, "pld")
        pld = _pld_accountant(phases, interval)
        grid = np.linspace(0.0, float(pld.get_epsilon(delta_floor)), points)
        return grid, np.asarray(pld.get_delta(grid), dtype=float)

    grid, deltas = bounded(
        compute, what=_what("pld", phases, delta_floor) + " (its privacy profile)", errors=(DegenerateRequest,)
    )
    grid.setflags(write=False)
    deltas.setflags(write=False)
    return grid, deltas


def parallel(*costs: tuple[float, float]) -> tuple[float, float]:
    """Mechanisms on disjoint data: the release is (max ε, max δ)-DP."""
    require(len(costs) >= 1, "nothing to compose")
    return max(c[0] for c in costs), max(c[1] for c in costs)


for _name in BUILTIN_ACCOUNTANTS:
    register_accountant(LibraryAccountant(_name))
ACCOUNTANTS.on_change(clear_caches)
