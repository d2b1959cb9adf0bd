import math

import pytest

from dpaudit_mix import accounting
from dpaudit_mix.accounting import (
    BUILTIN_ACCOUNTANTS,
    GaussianPhase,
    calibrate,
    epsilon,
    epsilons,
    gdp_epsilon,
    parallel,
)
from dpaudit_mix.base.errors import InputError


@pytest.mark.parametrize("sigma, steps, delta", [(40.0, 100, 1e-5), (5.0, 10, 1e-6), (1.0, 1, 1e-3)])
def test_full_batch_matches_gaussian_dp(sigma: float, steps: int, delta: float) -> None:
    exact = gdp_epsilon(sigma, steps, delta)
    eps = epsilons([GaussianPhase(sigma, 1.0, steps)], delta)
    assert eps["pld"] == pytest.approx(exact, rel=1e-3)  # PLD is exact up to discretisation
    assert eps["pld"] >= exact - 1e-9  # ... and pessimistic
    assert eps["prv"] == pytest.approx(exact, rel=0.05)
    assert eps["rdp"] >= exact  # RDP conversion is an upper bound


def test_gdp_formula_hand_case() -> None:
    # μ = 1 (σ = 1, T = 1): δ(ε=0) = Φ(1/2) − Φ(−1/2) = 0.3829; so ε(δ = 0.3829) = 0.
    assert gdp_epsilon(1.0, 1, 0.383) == 0.0
    assert gdp_epsilon(1.0, 1, 0.1) > gdp_epsilon(1.0, 1, 0.2) > 0


def test_subsampling_amplifies() -> None:
    full = epsilon([GaussianPhase(2.0, 1.0, 50)], 1e-5)
    sampled = epsilon([GaussianPhase(2.0, 0.1, 50)], 1e-5)
    assert sampled < full


@pytest.mark.parametrize("accountant", BUILTIN_ACCOUNTANTS)
def test_calibration_round_trip(accountant: str) -> None:
    sigma = calibrate(1.0, 1e-5, 0.2, 100, accountant)
    spent = epsilon([GaussianPhase(sigma, 0.2, 100)], 1e-5, accountant)
    assert 0.98 <= spent <= 1.0


def _searched(curve, target: float, rel_tol: float = 1e-3) -> tuple[float, int]:
    """σ from the calibration search on ε = curve(σ) (no accountant), and the σs it asked."""
    asked: set[float] = set()

    def excess(sigma: float) -> float:
        asked.add(sigma)
        return curve(sigma) - target

    return accounting.calibration.search(
        excess, target, delta=1e-5, sample_rate=0.5, steps=10, accountant="toy", rel_tol=rel_tol
    ), len(asked)


@pytest.mark.parametrize("power", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("offset", [0.5, 0.9, 1.0, 1.1, 1.45, 20.0])
def test_the_search_returns_a_minimal_sigma_in_few_questions(power: float, offset: float) -> None:
    """The search's contract on smooth curves ε = (σ★/σ)^p, σ★ the search's start times
    ``offset``: σ within the target, and σ one tolerance smaller above it. From a start within
    half to 1.5 times the root (where the accountants' starts fall), at most 6 accountant
    questions (Brent's method from a bracket of fixed steps asked PLD 3 to 7)."""
    root = accounting.calibration.start_sigma(1.0, 1e-5, 0.5, 10) * offset
    sigma, asked = _searched(lambda s: (root / s) ** power, 1.0)
    assert (root / sigma) ** power <= 1.0 < (root / (sigma / 1.001)) ** power
    assert asked <= 6 or offset == 20.0


@pytest.mark.parametrize(
    "curve",
    [
        lambda s: math.ceil(100 / s) / 100,  # a staircase, as a discretised accountant's
        lambda s: 5.0 if s < 2.0 else 1.0 / s,  # flat, then a cliff: the line through two points says nothing
        lambda s: 2.0 / s + 0.3 * math.sin(40 * s) ** 2 / s,  # wiggles
    ],
)
def test_the_search_keeps_its_contract_on_curves_no_line_fits(curve) -> None:
    sigma, _ = _searched(curve, 0.4, rel_tol=1e-3)
    assert curve(sigma) <= 0.4 < curve(sigma / 1.001)


def test_sequential_composition_costs_more_than_parallel() -> None:
    a, b = GaussianPhase(30.0, 1.0, 100), GaussianPhase(1.0, 0.05, 200)
    eps_a, eps_b = epsilon([a], 1e-5), epsilon([b], 1e-5)
    both = epsilon([a, b], 1e-5)
    assert both > max(parallel((eps_a, 1e-5), (eps_b, 1e-5))[0], eps_a, eps_b)
    assert both <= eps_a + eps_b + 1e-9


@pytest.mark.parametrize(
    "kwargs",
    [
        {"target_epsilon": 0.0},
        {"target_epsilon": -1.0},
        {"delta": 0.0},
        {"delta": 1.0},
        {"sample_rate": 0.0},
        {"sample_rate": 1.2},
        {"steps": 0},
    ],
)
def test_bad_calibration_input(kwargs: dict) -> None:
    args = {"target_epsilon": 1.0, "delta": 1e-5, "sample_rate": 1.0, "steps": 10, **kwargs}
    with pytest.raises(InputError):
        calibrate(**args)


def test_calibration_after_a_prior_phase_composes_to_the_target() -> None:
    prior = (GaussianPhase(40.0, 1.0, 100),)
    sigma = calibrate(2.0, 1e-5, 0.1, 200, prior=prior)
    total = epsilon([*prior, GaussianPhase(sigma, 0.1, 200)], 1e-5)
    assert 0.99 * 2.0 <= total <= 2.0
    assert sigma > calibrate(2.0, 1e-5, 0.1, 200)  # the prior's share costs noise later
    with pytest.raises(InputError, match="already spend"):
        calibrate(0.1, 1e-5, 0.1, 200, prior=(GaussianPhase(1.0, 1.0, 100),))


def test_calibration_refuses_meaningless_epsilon() -> None:
    with pytest.raises(InputError, match="epsilon must be in"):
        calibrate(1e4, 1e-5, 1.0, 1)


@pytest.mark.parametrize("target", [0.01, 0.05, 0.1])
@pytest.mark.parametrize("sample_rate, steps", [(1.0, 100), (0.01, 1000)])
def test_calibration_reaches_small_epsilon(target: float, sample_rate: float, steps: int) -> None:
    """PLD brackets on its own, so targets below RDP's conversion floor (≈ 0.1 at δ = 1e-5) work."""
    sigma = calibrate(target, 1e-5, sample_rate, steps)
    spent = epsilon([GaussianPhase(sigma, sample_rate, steps)], 1e-5)
    assert 0.99 * target <= spent <= target


def test_rdp_floor_is_named() -> None:
    with pytest.raises(InputError, match=r"the rdp accountant cannot certify epsilon 0\.05"):
        calibrate(0.05, 1e-5, 1.0, 100, "rdp")


@pytest.mark.parametrize("accountant", ["pld", "prv"])
def test_a_degenerate_request_is_refused_quickly(accountant: str) -> None:
    """σ = 0.01 grew the PLD's memory without bound and asked PRV for 26 GiB; now one line, fast."""
    import time

    from dpaudit_mix.accounting import DegenerateRequest

    start = time.perf_counter()
    with pytest.raises(DegenerateRequest, match="its RDP epsilon is"):
        epsilon([GaussianPhase(0.01, 0.1, 100)], 1e-5, accountant)
    assert time.perf_counter() - start < 10


def test_bounded_returns_values_and_refuses_what_overruns() -> None:
    """The guard every accountant call runs under: values and tuples come back, errors keep their
    type, and a computation past its deadline or its memory is an InputError naming it."""
    import time

    import numpy as np

    from dpaudit_mix.base.resources import bounded

    assert bounded(lambda: 2.5, what="x") == 2.5
    grid, values = bounded(lambda: (np.arange(3.0), np.ones(2)), what="x")
    assert grid.tolist() == [0.0, 1.0, 2.0] and values.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="bad value"):
        bounded(lambda: (_ for _ in ()).throw(ValueError("bad value")), what="x")
    with pytest.raises(InputError, match=r"the sleeper did not finish in 0\.5 s"):
        bounded(time.sleep, 30, what="the sleeper", seconds=0.5)
    with pytest.raises(InputError, match="the hog needs more than"):
        bounded(lambda: np.ones(2**40, dtype=np.uint8), what="the hog")


def test_bounded_all_answers_in_order_and_leaves_no_child_behind(monkeypatch) -> None:
    """Several guarded calls side by side: the answers in the order asked, the first failure in
    that order raised, each child's deadline its own, and every child it forked reaped."""
    import os
    import time

    from dpaudit_mix.base import resources

    forked: list[int] = []
    real = resources._fork

    def recording(*args):
        pid, pipe = real(*args)
        forked.append(pid)
        return pid, pipe

    monkeypatch.setattr(resources, "_fork", recording)

    def reaped(pid: int) -> bool:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True
        return False

    assert resources.bounded_all(lambda x: x * x, [(1.0,), (2.0,), (3.0,)], what=["a", "b", "c"]) == [1.0, 4.0, 9.0]

    def slow_or_fail(x: float) -> float:
        if x < 0:
            raise ValueError(f"negative {x}")
        time.sleep(x)
        return x

    with pytest.raises(ValueError, match="negative -1"):
        resources.bounded_all(slow_or_fail, [(0.0,), (-1.0,), (0.0,)], what=["a", "b", "c"])
    with pytest.raises(InputError, match=r"^b did not finish in 0\.5 s"):
        resources.bounded_all(slow_or_fail, [(0.0,), (30.0,), (30.0,)], what=["a", "b", "c"], seconds=0.5)
    # a failure stops the later calls still running at once, and starts none
    start = time.monotonic()
    with pytest.raises(ValueError, match="negative -1"):
        resources.bounded_all(slow_or_fail, [(-1.0,), (30.0,), (30.0,)], what=["a", "b", "c"])
    assert time.monotonic() - start < 10
    assert len(forked) >= 10 and all(reaped(pid) for pid in forked)
    with pytest.raises(InputError, match="one name per call"):
        resources.bounded_all(slow_or_fail, [(0.0,)], what=[])


def test_bounded_all_starts_the_next_call_when_a_lane_frees(monkeypatch) -> None:
    """Uneven calls share the lanes as a queue: on two lanes, a long call beside three short
    ones takes the long call's time, not two rounds of it (batches of two would wait twice)."""
    import time

    from dpaudit_mix.base import resources

    monkeypatch.setattr(resources.os, "sched_getaffinity", lambda _: {0, 1})

    def sleep(x: float) -> float:
        time.sleep(x)
        return x

    start = time.monotonic()
    assert resources.bounded_all(sleep, [(2.0,), (0.0,), (0.0,), (2.0,)], what=list("abcd")) == [2.0, 0.0, 0.0, 2.0]
    assert time.monotonic() - start < 3.5


@pytest.mark.parametrize("bad", [{"delta": "1e-5"}, {"delta": float("nan")}, {"delta": True}])
def test_every_public_function_checks_its_types(bad: dict) -> None:
    args = {"delta": 1e-5, **bad}
    with pytest.raises(InputError, match="delta must be in"):
        epsilon([GaussianPhase(1.0, 0.1, 10)], **args)
    with pytest.raises(InputError, match="phases must be GaussianPhase"):
        epsilon([(1.0, 0.1, 10)], 1e-5)  # type: ignore[list-item]


def test_epsilon_each_answers_as_epsilon_does_each_request_once(monkeypatch) -> None:
    """Requests of several accountants and δs in one call: every answer is :func:`epsilon`'s,
    the library accountants' distinct requests go to their children once and together, and an
    accountant of the user's is asked in this process."""
    from dataclasses import dataclass

    from dpaudit_mix import accounting

    @dataclass(frozen=True)
    class Doubled:
        name: str = "test-doubled-pld"

        def epsilon(self, phases, delta):  # type: ignore[no-untyped-def]
            return 2 * accounting.epsilon(phases, delta, "pld")

    batches: list[int] = []
    real = accounting.libraries.library_epsilons

    def counting(requests):  # type: ignore[no-untyped-def]
        batches.append(len(requests))
        return real(requests)

    a, b = [GaussianPhase(1.0, 0.1, 50)], [GaussianPhase(2.0, 1.0, 10), GaussianPhase(1.5, 0.5, 4)]
    requests = [(a, 1e-5, "pld"), (a, 1e-6, "prv"), (b, 1e-5, "rdp"), (a, 1e-5, "pld"), (b, 1e-5, "test-doubled-pld")]
    accounting.register_accountant(Doubled.name, Doubled())
    try:
        expected = [epsilon(phases, delta, name) for phases, delta, name in requests]
        accounting.clear_caches()  # asked afresh below
        monkeypatch.setattr(accounting.libraries, "library_epsilons", counting)
        assert accounting.epsilon_each(requests) == expected
    finally:
        accounting.ACCOUNTANTS.unregister("test-doubled-pld")
    assert batches[0] == 3  # the three distinct library requests, together; a at 1e-5 under pld once
    with pytest.raises(InputError, match="unknown accountant 'test-doubled-pld'"):
        accounting.epsilon_each([(a, 1e-5, "test-doubled-pld")])


def test_epsilon_each_names_the_request_a_library_fails_on(monkeypatch) -> None:
    """A library's own ValueError in one child of the side-by-side call is asked again alone, so
    the one InputError line names that request, as :func:`epsilon` would."""
    from dpaudit_mix import accounting

    real = accounting.libraries.library_epsilon

    def failing(phases, delta, name):  # type: ignore[no-untyped-def]
        if phases[0].steps == 7:
            raise ValueError("the library's own complaint")
        return real(phases, delta, name)

    monkeypatch.setattr(accounting.libraries, "library_epsilon", failing)
    accounting.clear_caches()
    requests = [([GaussianPhase(1.0, 1.0, steps)], 1e-5, "pld") for steps in (5, 7, 9)]
    with pytest.raises(InputError, match=r"the pld accountant failed on \[GaussianPhase.*steps=7.*the library's own"):
        accounting.epsilon_each(requests)


def test_calibrate_each_searches_side_by_side_and_this_process_learns_the_answers(monkeypatch) -> None:
    """Each σ is :func:`calibrate`'s; the searches ran in children, yet afterwards this process
    answers the same calibrations, and the ε each σ spends, without asking any accountant."""
    from dpaudit_mix import accounting

    requests = [(1.0, 1e-5, 0.1, 50, "pld"), (2.0, 1e-5, 1.0, 10, "prv"), (1.0, 1e-5, 0.1, 50, "pld")]
    accounting.clear_caches()
    alone = [calibrate(*r) for r in requests]
    accounting.clear_caches()
    assert accounting.calibrate_each(requests) == alone

    def no_library(requests):  # type: ignore[no-untyped-def]
        raise AssertionError(f"asked the library {requests}")

    monkeypatch.setattr(accounting.libraries, "library_epsilons", no_library)
    assert [calibrate(*r) for r in requests] == alone
    spent = accounting.epsilon_each(
        [([GaussianPhase(s, r[2], r[3])], r[1], r[4]) for s, r in zip(alone, requests, strict=True)]
    )
    assert all(e <= r[0] for e, r in zip(spent, requests, strict=True))


def test_a_child_forked_while_a_thread_holds_the_answers_lock_does_not_wait_for_it() -> None:
    """The memos' lock is made anew in every forked child: one copied while held would block the
    child's first lookup until its deadline."""
    import threading

    from dpaudit_mix import accounting
    from dpaudit_mix.base import resources

    memo, held, done = accounting.answers.EPSILONS, threading.Event(), threading.Event()

    def hold() -> None:
        with memo._lock:
            held.set()
            done.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    try:
        assert resources.bounded(lambda: float(memo.get("unknown") is None), what="a lookup", seconds=5) == 1.0
    finally:
        done.set()
        thread.join()


@pytest.mark.parametrize("sample_rate", [0.1, 1.0])
def test_a_vanishing_epsilon_calibrates_without_overflow(sample_rate: float) -> None:
    """ε = 1e-300 (a release spec's typo): the secant search once stepped to σ ~ 10³⁰⁰ and raised
    OverflowError; it now climbs as for any target and returns a σ within the largest accepted
    whose ε is within the target (a mechanism that noisy is (0, δ)-DP at δ = 1e-5)."""
    sigma = accounting.calibrate(1e-300, 1e-5, sample_rate, 100)
    assert sigma <= accounting.MAX_NOISE_MULTIPLIER
    assert accounting.epsilon([accounting.GaussianPhase(sigma, sample_rate, 100)], 1e-5) <= 1e-300
