"""The accountant protocol and registry: every ε we claim comes from an accountant in
:data:`ACCOUNTANTS`. The built-ins are opacus (`rdp`, `prv`) and Google dp_accounting (`pld`); a
user adds their own with :func:`register_accountant` (an object with ``name`` and
``epsilon(phases, delta)``, and optionally ``calibrate``), and every place that takes an
accountant's name accepts it."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

from ..base.errors import InputError, is_real, require
from ..base.registry import Registry
from . import libraries, profiles
from .answers import EPSILONS, SIGMAS
from .libraries import LibraryAccountant, replace_one_epsilon
from .phases import BUILTIN_ACCOUNTANTS, DEFAULT_ACCOUNTANT, GaussianPhase, check_delta, check_phases, request


@runtime_checkable
class Accountant(Protocol):
    """What an accountant gives: ε at δ of the sequential composition of Gaussian phases. It may
    also have ``calibrate(target_epsilon, delta, sample_rate, steps, prior) -> σ``; without one,
    :func:`calibrate` searches σ with its ``epsilon``."""

    @property
    def name(self) -> str: ...

    def epsilon(self, phases: Sequence[GaussianPhase], delta: float) -> float: ...


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


def register_accountant(name: str, accountant: Accountant, *, replace: bool = False) -> Accountant:
    """Make ``accountant`` an accountant every command and call accepts by ``name``.

    Args:
      name: the name specs and calls give (lowercase letters, digits, ``-``, ``_``, ``.``).
      accountant: an object with ``.name`` (= ``name``) and ``.epsilon(phases, delta) -> float``.
      replace: whether it may replace an accountant already registered under ``name``.

    Returns:
      ``accountant``.

    Raises:
      InputError: a bad name, an object without that shape, or a name taken (without ``replace``).
    """
    return ACCOUNTANTS.register(name, accountant, replace=replace)


def check_accountant(name: str) -> None:
    """An :class:`InputError` (a ValueError) naming the known accountants, unless ``name`` is one."""
    ACCOUNTANTS.get(name)


def epsilon(phases: Sequence[GaussianPhase], delta: float, accountant: str = DEFAULT_ACCOUNTANT) -> float:
    """ε at ``delta`` of the sequential composition of ``phases`` under ``accountant``.

    Args:
      phases: the Gaussian phases, run one after another on the same data (at least one).
      delta: δ, in (0, 1).
      accountant: the accountant asked (default PLD; a registered name).

    Returns:
      ε.

    Raises:
      InputError: no phases, a bad δ or accountant, or a library's own numeric failure.
    """
    check_delta(delta)
    check_accountant(accountant)
    require(len(phases) >= 1, "nothing to account")
    check_phases(phases)
    with _library_failures(accountant, list(phases), delta):
        return known_epsilon(tuple(phases), float(delta), accountant)


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


def known_epsilon(phases: tuple[GaussianPhase, ...], delta: float, accountant: str) -> float:
    """:func:`epsilon` once per request (an audit asks the same of every result, calibration of
    every σ it tries twice)."""
    known = EPSILONS.get((phases, delta, accountant))
    if known is not None:
        return known
    value = _checked_epsilon(ACCOUNTANTS.get(accountant).epsilon(phases, delta), phases, delta, accountant)
    return EPSILONS.put((phases, delta, accountant), value)


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
        asked.append((*request(phases, delta), accountant))
    distinct = [r for r in dict.fromkeys(asked) if EPSILONS.get(r) is None]
    library = [r for r in distinct if isinstance(ACCOUNTANTS.get(r[2]), LibraryAccountant)]
    try:
        values = libraries.library_epsilons(library) if library else []
        for v, r in zip(values, library, strict=True):
            EPSILONS.put(r, _checked_epsilon(v, *r))
    except (ValueError, ArithmeticError) as exc:  # a library's failure: asked alone, so it is named
        if isinstance(exc, InputError):
            raise
    return [epsilon(*r) for r in asked]  # each now known, but for the failure asked again and the user's


def clear_caches() -> None:
    """Forget every cached answer: what verify-accountant calls around a mutant, and what any
    change to the registered accountants triggers, so that no answer outlives its accountant."""
    EPSILONS.clear()
    SIGMAS.clear()
    for cached_function in (profiles.optimistic_cache, replace_one_epsilon, profiles.profile_curve):
        cached_function.cache_clear()


def pld_epsilon(phases: Sequence[GaussianPhase], delta: float, *, replace_one: bool = False) -> float:
    """ε at ``delta`` from dp_accounting's PLD under add/remove neighbouring (the ``pld``
    accountant) or, ``replace_one``, under replace-one (where a Gaussian's sensitivity is 2C):
    the yardstick a user's own accountant is checked against (:mod:`.testing`)."""
    if not replace_one:
        return epsilon(phases, delta, "pld")
    return replace_one_epsilon(*request(phases, delta))


def epsilons(phases: Sequence[GaussianPhase], delta: float) -> dict[str, float]:
    """ε under every built-in (library) accountant, keyed by name: their cross-check."""
    return dict(
        zip(BUILTIN_ACCOUNTANTS, epsilon_each([(phases, delta, name) for name in BUILTIN_ACCOUNTANTS]), strict=True)
    )


for _name in BUILTIN_ACCOUNTANTS:
    register_accountant(_name, LibraryAccountant(_name))
ACCOUNTANTS.on_change(clear_caches)
