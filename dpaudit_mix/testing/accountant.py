"""``check_accountant``: a user's ε(σ, q, T, δ) (and σ calibrator) against dp_accounting's PLD.

What a valid accountant of the Poisson-subsampled Gaussian must do, checked on a grid that holds
the corners where the field's accountants broke (tiny q, large T, small δ, large ε: Opacus
#844/#585 returned negative ε there):

- return a finite float ε ≥ 0 (not NaN, not a bool, not a tensor, no exception);
- be no more optimistic than the PLD accountant beyond ``tolerance``: PLD is tight for the
  subsampled Gaussian, so an ε below it is an ε that the mechanism does not have; the tolerance
  is relative (2 %) with an absolute part of only 0.001, so a small ε cannot hide in it (at the
  tiny-q point PLD says 0.0065: an accountant that answers 0 there, or halves it, fails);
- not over-report beyond :data:`OVER_REPORT` × PLD (an accountant that ignores q or counts a
  step per epoch over-reports 10–360×: its users add that much more noise than they need); with
  ``strict=False`` such a case is reported, not failed (a deliberately conservative accountant);
- fall strictly as σ grows and rise strictly with q, with T and as δ falls (sweeps around a base
  point): a sweep whose ε does not move by :data:`RESOLUTION` between points where PLD moves by
  40–92 % is an input the accountant does not use, and is named so; the failure message leads
  with it, as it explains the grid's failures. Where the grid's under-reports follow one input
  (every subsampled point short while the full-batch ones are right: q squared, or per epoch),
  a case naming that input leads instead;
- with a calibrator σ(ε, q, T, δ): its σ spends at most ε, by the user's accountant and by PLD.

**In bounded time, on any accountant.** Every call of the user's functions runs in a forked
child with a deadline (:data:`POINT_SECONDS`; :func:`..resources.bounded`): a call past it is
stopped and fails its case in one line naming the point. The sweeps run first, each from its
cheapest point (small q, few steps, large σ: small ε), and stop at the first step that does not
move; a sweep that shows an unused input, or a call that failed, ends the check there (the grid's
points would fail for the same reason, and an accountant that ignores q spends minutes on each:
ε ≈ 600 at q read as 1). No point is asked past :data:`CHECK_SECONDS`.

Under replace-one neighbouring (``neighbouring="replace_one"``) one example's change moves the
clipped sum by 2C, not C; PLD is then asked under that relation (google/differential-privacy
#378: an accountant given σ for a replace-one claim under-reports RDP fourfold).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import accounting
from ..base.errors import InputError, is_real, require
from ..base.resources import bounded
from .failure import Case, Report

#: the user's accountant: ε at δ of T steps of the Poisson-subsampled Gaussian (σ, q).
EpsilonFn = Callable[[float, float, int, float], float]
#: the user's calibrator: σ for ε at δ, q and T.
CalibrateFn = Callable[[float, float, int, float], float]
NEIGHBOURING = ("add_remove", "replace_one")

#: (absolute, relative to PLD): how far below PLD a valid accountant may land. On the default grid
#: Opacus' PRV (eps_error 0.01) lands at most 0.0053 below PLD (at δ = 1e-12, ε 3.91: 0.13 %; its
#: report's ``largest_shortfall_below_pld``); RDP never below. The absolute part is small so that
#: at the tiny-q point (PLD ε 0.0065) the floor is 0.0054, not below zero.
TOLERANCE = (0.001, 0.02)
#: over-reporting: ε above this many times PLD's (or :data:`OVER_REPORT_FLOOR`, whichever is
#: larger: a ratio of two tiny ε means little, and Opacus' RDP is 52× PLD at the tiny-q point,
#: 0.34 against 0.0065, where both are small).
OVER_REPORT, OVER_REPORT_FLOOR = 10.0, 0.1
#: a sweep step must move ε by more than this fraction of the larger value (PLD moves 40–92 % per
#: step on :data:`SWEEPS`; an accountant's own discretisation moves it far less than 1 %).
RESOLUTION = 0.01
#: a calibrated σ may spend this fraction above its target (calibrators search to a tolerance).
CALIBRATION_OVERSHOOT = 1e-3


@dataclass(frozen=True)
class Point:
    """One request: T steps of the subsampled Gaussian (σ, q), ε asked at δ.

    Attributes:
      noise_multiplier: σ.
      sample_rate: q.
      steps: T.
      delta: δ.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float

    def __str__(self) -> str:
        return f"σ={self.noise_multiplier:g} q={self.sample_rate:g} T={self.steps} δ={self.delta:g}"

    @property
    def phase(self) -> accounting.GaussianPhase:
        return accounting.GaussianPhase(self.noise_multiplier, self.sample_rate, self.steps)


#: the default grid: typical points and the corners (about 8 s of PLD on 2 cores, once per process).
DEFAULT_GRID: tuple[Point, ...] = (
    Point(1.0, 0.01, 1000, 1e-5),
    Point(1.5, 0.25, 20, 1e-5),
    Point(1.0, 1.0, 10, 1e-5),  # full batch
    Point(1.0, 1e-5, 10_000, 1e-5),  # tiny q: ε ≈ 0.007, where RDP conversions went negative
    Point(2.0, 1e-3, 10_000, 1e-10),  # tiny q, small δ
    Point(1.0, 1e-3, 100_000, 1e-5),  # large T
    Point(4.0, 0.01, 10_000, 1e-5),  # large σ, large T
    Point(1.0, 0.01, 1000, 1e-12),  # small δ
    Point(0.5, 1.0, 10, 1e-5),  # large ε (46)
    Point(0.6, 0.5, 20, 1e-5),  # large ε, subsampled (34)
)
#: the quick grid: a typical point, full batch, the tiny-q corner and a large ε (what the release
#: gate puts a registered accountant through before it calibrates a release with it).
QUICK_GRID: tuple[Point, ...] = (DEFAULT_GRID[0], DEFAULT_GRID[2], DEFAULT_GRID[3], DEFAULT_GRID[9])
#: monotonicity sweeps: (axis, values) around SWEEP_BASE, each from its cheapest point (smallest ε)
#: on: ε must rise along every one (q and T up, σ down).
SWEEP_BASE = Point(1.0, 0.01, 1000, 1e-5)
SWEEPS: tuple[tuple[str, tuple[float, ...]], ...] = (
    ("sample_rate", (1e-4, 1e-3, 0.01, 0.05, 0.2, 1.0)),
    ("steps", (1, 10, 100, 1000, 10_000)),
    ("delta", (1e-3, 1e-5, 1e-8, 1e-12)),
    ("noise_multiplier", (5.0, 2.5, 1.5, 1.0, 0.8, 0.6)),
)
#: the q sweep's points held to PLD as well as to rising (its cheap end: PLD answers them in a second)
SWEEP_REFERENCE_Q = 0.01
#: the seconds one call of the user's function may take, and the whole check's (no point is asked
#: after it). The slowest honest call is the q sweep's q = 1 (ε ≈ 634): dp_accounting's PLD took
#: 18.2 s there (2026-12-06), so a call has room to spare; an accountant that reads q as 1 spends
#: that on the sweep's first two points and fails there.
POINT_SECONDS, CHECK_SECONDS = 60.0, 300.0
#: what a sweep that does not move suggests.
_UNUSED = {
    "noise_multiplier": "is the noise multiplier used?",
    "sample_rate": "is the sampling rate used?",
    "steps": "are the steps counted (one per batch, not one per epoch)?",
    "delta": "is δ used?",
}
#: calibration round trips: (target ε, q, T) at δ = 1e-5.
CALIBRATIONS: tuple[tuple[float, float, int], ...] = ((1.0, 1.0, 10), (4.0, 0.01, 1000), (8.0, 0.1, 100))
CALIBRATION_DELTA = 1e-5


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _checked(fn: Callable[..., Any], name: str, args: tuple[Any, ...]) -> tuple[float, str]:
    """The user's function on ``args``: (its value, "") when it is a finite real ≥ 0, else
    (NaN, what went wrong). Runs in the forked child of :meth:`_Clock.answer`, where torch's
    OpenMP pool, if the parent had started one, is a copy without its threads: one thread keeps
    an accountant that uses torch from waiting on them forever."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    try:
        value = fn(*args)
    except Exception as exc:  # the user's code: any failure is the finding, never our traceback
        return math.nan, f"{name} raised {type(exc).__name__}: {exc}"
    try:  # a value's own methods are the user's code too (an int past every float, a raising __lt__)
        if not is_real(value):
            return math.nan, f"{name} returned {_describe(value)}, not a float"
        number = float(value)
    except Exception as exc:
        return math.nan, f"{name} returned a value that is no float ({type(exc).__name__}: {exc})"
    if not math.isfinite(number):
        return math.nan, f"{name} returned {value!r}, not a finite number"
    if number < 0:
        return math.nan, f"{name} returned a negative value {number:.4g} (Opacus #585/#844: negative ε in corners)"
    return number, ""


@dataclass
class _Clock:
    """The check's deadline: each call gets :data:`POINT_SECONDS`, or what is left of :data:`CHECK_SECONDS`."""

    ends: float

    @classmethod
    def start(cls) -> _Clock:
        return cls(time.monotonic() + CHECK_SECONDS)

    def answer(self, fn: Callable[..., Any], name: str, args: tuple[Any, ...]) -> tuple[float | None, str]:
        """:func:`_checked` in a forked child under the deadline: (its value, "") or (None, why not)."""
        seconds = min(POINT_SECONDS, self.ends - time.monotonic())
        if seconds <= 0:
            return None, f"not asked: the check's {CHECK_SECONDS:g} s ran out"
        try:
            value, fault = bounded(_checked, fn, name, args, what=f"{name}{args}", seconds=seconds)
        except InputError as exc:  # past its deadline, or out of memory: the child is stopped
            if "did not finish" not in str(exc):
                return None, str(exc)
            if seconds < POINT_SECONDS:
                return None, f"{name}{args} stopped after {seconds:.3g} s: the check's {CHECK_SECONDS:g} s ran out"
            return None, f"{name}{args} did not answer within {POINT_SECONDS:g} s (stopped)"
        except (ValueError, ArithmeticError) as exc:  # the child died of the user's value
            return None, f"{name}{args} failed: {type(exc).__name__}: {exc}"
        return (None, str(fault)) if fault else (float(value), "")


def _reference(point: Point, replace_one: bool) -> float:
    return accounting.pld_epsilon([point.phase], point.delta, replace_one=replace_one)


def _grid_cases(
    epsilon_fn: EpsilonFn,
    grid: Sequence[Point],
    tolerance: tuple[float, float],
    replace_one: bool,
    strict: bool,
    clock: _Clock,
) -> tuple[list[Case], float, list[str]]:
    """Each grid point's case, the largest shortfall below PLD, and the points that over-report;
    where the under-reports lie along one input, a case naming it leads (:func:`_diagnosis`)."""
    cases, worst, over, under = [], 0.0, [], []
    for point in grid:
        mine, fault = clock.answer(
            epsilon_fn, "epsilon_fn", (point.noise_multiplier, point.sample_rate, point.steps, point.delta)
        )
        if mine is None:
            cases.append(Case(str(point), False, fault))
            continue
        pld = _reference(point, replace_one)
        floor = pld - tolerance[0] - tolerance[1] * pld
        worst = min(worst, mine - pld)
        passed = mine >= floor
        if not passed:
            under.append((point, mine, pld))
            why = f"ε {mine:.4g} is below PLD's {pld:.4g} by more than the tolerance: it under-reports"
        elif mine > OVER_REPORT * max(pld, OVER_REPORT_FLOOR):
            over.append(str(point))
            passed = not strict
            why = (
                f"ε {mine:.4g} is more than {OVER_REPORT:g}× PLD's {pld:.4g}: it over-reports "
                "(more noise than the claim needs"
                + ("; pass strict=False to accept a deliberately conservative accountant)" if strict else ", accepted)")
            )
        else:
            why = f"ε {mine:.4g} (PLD {pld:.4g})"
        cases.append(Case(str(point), passed, why))
    return _diagnosis(grid, under, cases) + cases, worst, over


def _diagnosis(grid: Sequence[Point], under: list[tuple[Point, float, float]], cases: list[Case]) -> list[Case]:
    """A case that names the input the grid's under-reports follow, to lead the message: every
    point that under-reports is subsampled (q < 1) while the full-batch points pass (ε right at q =
    1, too small below it: q squared, q per batch of a batch count, q from the wrong loader), or
    every one is at a small δ while δ = 10⁻⁵ passes. None where no one input explains them."""
    if not under:
        return []
    passed = {c.where for c in cases if c.passed}
    full_batch_passes = any(p.sample_rate == 1 and str(p) in passed for p in grid)
    shown = "; ".join(f"{p.sample_rate:g}: ε {mine:.4g} against {pld:.4g}" for p, mine, pld in under[:3])
    if full_batch_passes and all(p.sample_rate < 1 for p, _, _ in under):
        return [
            Case(
                "sample_rate",
                False,
                f"ε is PLD's at q = 1 but below it at q < 1 (at q {shown}): is the sampling rate used as given "
                "(not squared, not per epoch, the loader's 1/len(loader))?",
            )
        ]
    small = min(p.delta for p in grid)
    if (
        small < 1e-8
        and all(p.delta == small for p, _, _ in under)
        and any(p.delta > small and str(p) in passed for p in grid)
    ):
        return [Case("delta", False, f"ε is below PLD's only at δ = {small:g}: is δ used as given?")]
    return []


def _sweep_step(axis: str, a: float, b: float, ea: float, eb: float, answers: list[float]) -> str:
    """Why ε fails to rise, beyond :data:`RESOLUTION`, from ``a`` to ``b`` along a sweep ("" when it rises)."""
    change = eb - ea
    if change < -RESOLUTION * max(ea, eb):
        return f"ε falls from {ea:.4g} to {eb:.4g} as {axis} goes from {a:g} to {b:g}"
    if change <= RESOLUTION * max(ea, eb):
        return (
            f"ε does not change with {axis}: {ea:.4g} at {a:g} and {eb:.4g} at {b:g} "
            f"({[round(e, 4) for e in answers]}): {_UNUSED[axis]}"
        )
    return ""


def _sweep_cases(epsilon_fn: EpsilonFn, tolerance: tuple[float, float], replace_one: bool, clock: _Clock) -> list[Case]:
    """Each sweep of :data:`SWEEPS`, from its cheapest point, up to the first step where ε does not
    rise (the way PLD moves, by 40–92 % a step): that case fails, and no sweep after it is asked.
    Along q, the points up to :data:`SWEEP_REFERENCE_Q` are held to PLD too (cheap there): an ε
    short of it at small q names the sampling rate (q squared, or steps per epoch: ε still rises
    with q and T, but a later sweep would go flat where the real cause is q)."""
    cases: list[Case] = []
    for axis, values in SWEEPS:
        where = f"sweep over {axis} {list(values)} at {SWEEP_BASE}"
        answers: list[float] = []
        for at, value in enumerate(values):
            point = Point(**{**vars(SWEEP_BASE), axis: type(getattr(SWEEP_BASE, axis))(value)})
            mine, fault = clock.answer(epsilon_fn, "epsilon_fn", (*vars(point).values(),))
            if mine is None:
                return [*cases, Case(f"{where}, {axis}={value:g}", False, fault)]
            answers.append(mine)
            if at >= 1 and (why := _sweep_step(axis, values[at - 1], value, answers[-2], mine, answers)):
                return [*cases, Case(where, False, why)]
            if axis == "sample_rate" and value <= SWEEP_REFERENCE_Q:
                pld = _reference(point, replace_one)
                if mine < pld - tolerance[0] - tolerance[1] * pld:
                    why = (
                        f"ε {mine:.4g} at q = {value:g} is below PLD's {pld:.4g}: is the sampling rate used as given "
                        "(not squared), and every step counted (not one per epoch)?"
                    )
                    return [*cases, Case(where, False, why)]
        cases.append(Case(where, True, f"ε rises along it: {[round(e, 4) for e in answers]}"))
    return cases


def _calibration_cases(
    epsilon_fn: EpsilonFn, calibrate_fn: CalibrateFn, tolerance: tuple[float, float], replace_one: bool, clock: _Clock
) -> list[Case]:
    cases = []
    for target, q, steps in CALIBRATIONS:
        where = f"calibration for ε={target:g} q={q:g} T={steps} δ={CALIBRATION_DELTA:g}"
        sigma, fault = clock.answer(calibrate_fn, "calibrate_fn", (target, q, steps, CALIBRATION_DELTA))
        if sigma is None or sigma == 0:
            cases.append(Case(where, False, fault or "calibrate_fn returned σ = 0"))
            continue
        point = Point(sigma, q, steps, CALIBRATION_DELTA)
        mine, fault = clock.answer(epsilon_fn, "epsilon_fn", (sigma, q, steps, CALIBRATION_DELTA))
        if mine is None:
            cases.append(Case(where, False, fault))
            continue
        pld = _reference(point, replace_one)
        ceiling = target * (1 + CALIBRATION_OVERSHOOT)
        why = []
        if mine > ceiling:
            why.append(f"σ {sigma:.4g} spends ε {mine:.4g} by epsilon_fn itself, above the target")
        if pld - tolerance[0] - tolerance[1] * pld > target:
            why.append(f"σ {sigma:.4g} spends ε {pld:.4g} by PLD, above the target by more than the tolerance")
        cases.append(Case(where, not why, "; ".join(why) or f"σ {sigma:.4g} spends ε {mine:.4g} (PLD {pld:.4g})"))
    return cases


def check_accountant(
    epsilon_fn: EpsilonFn,
    *,
    calibrate_fn: CalibrateFn | None = None,
    grid: Sequence[Point] | None = None,
    tolerance: tuple[float, float] = TOLERANCE,
    neighbouring: str = "add_remove",
    sweeps: bool = True,
    strict: bool = True,
) -> Report:
    """Check a user's accountant against PLD, as the module says: the sweeps first (a flat sweep
    explains the grid's failures), then the grid.

    Args:
      epsilon_fn: ``epsilon_fn(noise_multiplier, sample_rate, steps, delta) -> ε``.
      calibrate_fn: ``calibrate_fn(epsilon, sample_rate, steps, delta) -> σ``, checked too.
      grid: ``Point`` values replacing ``DEFAULT_GRID``.
      tolerance: (absolute, relative) slack of an answer below PLD's.
      neighbouring: the relation the accountant claims, ``add_remove`` or ``replace_one``.
      sweeps: run the monotonicity sweeps (in q, T, δ and σ).
      strict: False reports an over-report beyond ``OVER_REPORT`` × PLD
        (``details["over_reports"]``) without failing.

    Returns:
      The ``Report`` of a passed check.

    Raises:
      CheckFailed: an ``AssertionError`` naming the cases that fail.
      InputError: a bad argument."""
    require(callable(epsilon_fn), f"epsilon_fn must be callable, got {_describe(epsilon_fn)}")
    require(
        calibrate_fn is None or callable(calibrate_fn), f"calibrate_fn must be callable, got {_describe(calibrate_fn)}"
    )
    require(
        neighbouring in NEIGHBOURING, f"neighbouring must be one of {', '.join(NEIGHBOURING)}, got {neighbouring!r}"
    )
    require(
        isinstance(tolerance, tuple) and len(tolerance) == 2 and all(is_real(t) and t >= 0 for t in tolerance),
        f"tolerance must be (absolute, relative), two numbers >= 0, got {tolerance!r}",
    )
    points = DEFAULT_GRID if grid is None else tuple(grid)
    require(len(points) >= 1, "the grid is empty: give at least one Point, or None for the default grid")
    require(all(isinstance(p, Point) for p in points), "every grid entry must be a dpaudit_mix.testing.Point")
    for p in points:
        accounting.GaussianPhase(p.noise_multiplier, p.sample_rate, p.steps)  # validates σ, q, T
        accounting.check_delta(p.delta)
    require(isinstance(strict, bool), f"strict must be True or False, got {_describe(strict)}")
    replace_one, clock = neighbouring == "replace_one", _Clock.start()
    cases = _sweep_cases(epsilon_fn, tolerance, replace_one, clock) if sweeps else []
    worst: float = 0.0
    over: list[str] = []
    stopped = next((c.where for c in cases if not c.passed), None)
    if stopped is None:
        grid_cases, worst, over = _grid_cases(epsilon_fn, points, tolerance, replace_one, strict, clock)
        cases += grid_cases
        if calibrate_fn is not None:
            cases += _calibration_cases(epsilon_fn, calibrate_fn, tolerance, replace_one, clock)
    details = {
        "neighbouring": neighbouring,
        "tolerance": list(tolerance),
        "largest_shortfall_below_pld": -worst,
        "over_reports": over,
        "strict": strict,
        # the failed sweep that ended the check before the grid (whose points it explains)
        "stopped_at": stopped,
        "seconds": round(CHECK_SECONDS - (clock.ends - time.monotonic()), 3),
    }
    return Report("check_accountant", tuple(cases), details).raise_on_failure()
