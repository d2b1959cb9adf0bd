"""The seams, used from outside the package: a toy mechanism, world, accountant and threshold
strategy registered the way a user's code would, then an audit, a problem build and a calibration
run with them; unknown names are errors, never a fallback."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from dpaudit_mix import accounting
from dpaudit_mix.accounting import GaussianPhase
from dpaudit_mix.audit import attack as attacks
from dpaudit_mix.audit.many_run.engine import run_audit
from dpaudit_mix.audit.mechanisms import MECHANISMS, register_mechanism
from dpaudit_mix.audit.mechanisms.base import RunPlan, Setting
from dpaudit_mix.audit.spec import AuditSpec
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import register_purpose, stream
from dpaudit_mix.cli import main
from dpaudit_mix.data import registry as worlds
from dpaudit_mix.data.proxies import ProxySpec
from dpaudit_mix.problem import Problem

from .conftest import random_problem


@dataclass(frozen=True)
class GDPAccountant:
    """Full-batch Gaussian phases, exactly: μ-GDP with μ² = Σ T/σ² (Dong, Roth & Su 2019)."""

    name: str = "toy-gdp"

    def epsilon(self, phases: Sequence[GaussianPhase], delta: float) -> float:
        assert all(p.sample_rate == 1 for p in phases), "full batch only"
        mu = float(np.sqrt(sum(p.steps / p.noise_multiplier**2 for p in phases)))
        return accounting.gdp_epsilon_of_mu(mu, delta)


NOISE = register_purpose("toy-gaussian-noise")


@dataclass(frozen=True)
class GaussianCollector:
    """One release of (canary in) + N(0, σ²): the white-box score is the release itself."""

    sigma: float
    seed: int

    def __call__(self, setting: Setting, runs: np.ndarray, include: np.ndarray) -> dict[str, np.ndarray]:
        noise = stream(self.seed, NOISE, audit=setting.name).numpy().normal(size=len(runs))
        released = include.astype(float) + (self.sigma if setting.noise else 0.0) * noise
        return {"black_box": released, "white_box": released}


class GaussianMechanism:
    """The Gaussian mechanism at sensitivity 1, σ calibrated by the spec's ε (one full-batch step)."""

    def check(self, spec: AuditSpec) -> None:
        if spec.canaries != ("max_clip",):
            raise ValueError("a Dirac canary only")

    def plan(self, spec: AuditSpec, full: Problem, data: Problem, noise_multiplier: float | None) -> RunPlan:
        sigma = accounting.calibrate(spec.epsilon, spec.delta, 1.0, 1, accountant="toy-gdp")
        return RunPlan(
            collect=GaussianCollector(sigma if noise_multiplier is None else noise_multiplier, spec.seed),
            claimed_phases=(GaussianPhase(sigma, 1.0, 1),),
            noise_multiplier=sigma if noise_multiplier is None else noise_multiplier,
            problem={"name": spec.problem, "n_mixing": data.n},
            canaries={"max_clip": {"norm": 1.0}},
            processes=False,
            accountant="toy-gdp",
        )


@dataclass(frozen=True)
class ToyWorld:
    """A world a user registers: a seeded random problem for each of its two tasks."""

    tasks: tuple[str, ...] = ("up", "down")

    def build(self, task: str, seed: int, shards: int, proxy: ProxySpec) -> Problem:
        prob = random_problem(120, 3, seed=seed + (task == "down"))
        return Problem(prob.logp, prob.sources, heldout_logp=random_problem(10, 3, seed=9).logp, task=task)


def _strictest(scores, include, select, delta, confidence):  # type: ignore[no-untyped-def]
    """A user's threshold strategy: bonferroni's tests, reported as the one strict point."""
    chosen = attacks.bonferroni(scores, include, select, delta, confidence)
    return attacks.Thresholds(
        chosen.strict, chosen.gdp, chosen.points, chosen.candidates, chosen.evaluated, chosen.point_confidence
    )


@pytest.fixture
def toys() -> Iterator[None]:
    accounting.register_accountant("toy-gdp", GDPAccountant())
    register_mechanism("toy-gaussian", GaussianMechanism())
    worlds.register_world("toy-world", ToyWorld())
    attacks.register_threshold_strategy("toy-strict", _strictest)
    yield
    accounting.ACCOUNTANTS.unregister("toy-gdp")
    MECHANISMS.unregister("toy-gaussian")
    worlds.WORLDS.unregister("toy-world")
    attacks.THRESHOLDS.unregister("toy-strict")


def test_a_users_accountant_calibrates_and_is_accepted_by_name(toys, capsys) -> None:
    sigma = accounting.calibrate(1.0, 1e-5, 1.0, 10, accountant="toy-gdp")
    pld = accounting.calibrate(1.0, 1e-5, 1.0, 10, accountant="pld")
    assert accounting.epsilon([GaussianPhase(sigma, 1.0, 10)], 1e-5, "toy-gdp") <= 1.0
    assert sigma == pytest.approx(pld, rel=0.01)  # PLD is pessimistic: its σ is at least GDP's exact one
    assert (
        main(
            [
                "calibrate",
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                "--sample-rate",
                "1",
                "--steps",
                "10",
                "--accountant",
                "toy-gdp",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["noise_multiplier"] == pytest.approx(sigma)


def test_a_users_world_builds_a_problem_by_name(toys, tmp_path: Path) -> None:
    built = worlds.build("toy-world", "down", seed=4)
    assert built.task == "down" and built.k == 3 and "toy-world" in worlds.PROBLEMS
    assert main(["problem", "toy-world", "--task", "up", "--out", str(tmp_path / "p.npz")]) == 0
    with pytest.raises(InputError, match="unknown task 'sideways' for toy-world; available: up, down"):
        worlds.build("toy-world", "sideways")
    with pytest.raises(InputError, match="proxy = 'cnn' applies to the image worlds"):
        worlds.proxy_spec("toy-world", "cnn", None)


def test_an_audit_of_a_users_mechanism_on_a_users_world(toys, tmp_path: Path) -> None:
    """The Gaussian mechanism, honest: no violation, and its power is near the claim's ε."""
    spec = AuditSpec(
        mechanism="toy-gaussian",
        problem="toy-world",
        task="up",
        canaries=("max_clip",),
        runs=4000,
        chunk_size=1000,
        threshold="toy-strict",
        epsilon=2.0,
    )
    outcome = run_audit(spec, tmp_path / "audit", progress=False)
    summary = outcome.summary
    noisy = [r for r in summary.results if r.noise and r.threat == "white_box"]
    assert not summary.violation and summary.threshold_strategy == "toy-strict" and len(noisy) == 1
    assert 0.3 < noisy[0].epsilon_lower_bound <= 2.0  # a real leak is seen, never above the claim
    assert not summary.inconclusive  # and the σ = 0 control sees the canary
    assert summary.mechanism == "toy-gaussian"
    with pytest.raises(InputError, match="a Dirac canary only"):
        AuditSpec(mechanism="toy-gaussian", problem="toy-world", task="up")


def test_a_dishonest_accountant_is_an_error_never_a_claim(toys) -> None:
    @dataclass(frozen=True)
    class Liar:
        name: str = "toy-liar"
        answer: float = float("nan")

        def epsilon(self, phases: Sequence[GaussianPhase], delta: float) -> float:
            return self.answer

        def calibrate(self, target_epsilon, delta, sample_rate, steps, prior):  # type: ignore[no-untyped-def]
            return 0.5  # far too little noise for the target

    accounting.register_accountant(Liar.name, Liar())
    try:
        with pytest.raises(InputError, match="returned nan"):
            accounting.epsilon([GaussianPhase(1.0, 1.0, 1)], 1e-5, "toy-liar")
        accounting.register_accountant(Liar.name, Liar(answer=50.0), replace=True)
        with pytest.raises(InputError, match="whose epsilon by its own epsilon\\(\\) is 50"):
            accounting.calibrate(1.0, 1e-5, 1.0, 1, accountant="toy-liar")
    finally:
        accounting.ACCOUNTANTS.unregister("toy-liar")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: accounting.epsilon([GaussianPhase(1.0, 1.0, 1)], 1e-5, "gdp"), "unknown accountant 'gdp'; known: rdp"),
        (lambda: accounting.calibrate(1.0, 1e-5, 1.0, 1, accountant="Pld"), "unknown accountant 'Pld'"),
        (lambda: AuditSpec(mechanism="sgd"), "unknown mechanism 'sgd'; known: dpmixmin"),
        (lambda: AuditSpec(threshold="holm"), "unknown threshold strategy 'holm'; known: bonferroni, split"),
        (lambda: worlds.build("cifar"), "unknown problem 'cifar'"),
        (lambda: accounting.register_accountant("pld", GDPAccountant(name="pld")), "already registered"),
        (lambda: register_mechanism("Bad Name", GaussianMechanism()), "lowercase letters"),
        (lambda: register_mechanism("no-plan", object()), "needs a plan"),  # type: ignore[arg-type]
        (lambda: worlds.register_world("mnist", ToyWorld()), "already registered|alias"),
    ],
)
def test_unknown_names_and_bad_registrations_are_value_errors(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_entry_point_plugins_load_once_and_a_broken_one_is_one_line(monkeypatch) -> None:
    from importlib.metadata import EntryPoint

    from dpaudit_mix.base import registry

    loaded: list[str] = []
    fresh: registry.Registry[object] = registry.Registry("gadget", "gadgets")

    class Point(EntryPoint):
        def load(self):  # type: ignore[no-untyped-def]
            loaded.append(self.name)
            if self.name == "broken":
                raise ImportError("no module named gadgets_plus")
            fresh.register(self.name, object())

    groups = {"dpaudit_mix.gadgets": [Point("spanner", "gadgets:spanner", "dpaudit_mix.gadgets")]}
    monkeypatch.setattr(registry, "entry_points", lambda group: groups.get(group, []))
    assert fresh.names() == ("spanner",) and "spanner" in fresh and fresh.names() == ("spanner",)
    assert loaded == ["spanner"]
    broken: registry.Registry[object] = registry.Registry("gizmo", "gizmos")
    groups["dpaudit_mix.gizmos"] = [Point("broken", "gizmos_plus:x", "dpaudit_mix.gizmos")]
    with pytest.raises(InputError, match=r"the gizmo plugin 'broken' .* failed to load: no module named gadgets_plus"):
        broken.get("anything")


@dataclass(frozen=True)
class _Raising:
    """A user's accountant with a bug of its own kind (not a ValueError)."""

    name: str = "toy-raising"
    error: type[Exception] = RuntimeError

    def epsilon(self, phases: Sequence[GaussianPhase], delta: float) -> float:
        raise self.error("the cache server is down")


@dataclass(frozen=True)
class _BrokenWorld:
    tasks: tuple[str, ...] = ("up",)

    def build(self, task: str, seed: int, shards: int, proxy: ProxySpec) -> Problem:
        return {}["rows"]  # a KeyError in the user's world


@pytest.mark.parametrize("error", [RuntimeError, KeyError])
def test_a_users_code_that_raises_anything_is_one_line_and_exit_2(error, capsys, tmp_path: Path) -> None:
    accounting.register_accountant("toy-raising", _Raising(error=error))
    worlds.register_world("toy-broken", _BrokenWorld())
    try:
        calibrate = ["calibrate", "--epsilon", "1", "--delta", "1e-5", "--sample-rate", "1", "--steps", "10"]
        assert main([*calibrate, "--accountant", "toy-raising"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "Traceback" not in err
        assert err.startswith(f"dpaudit-mix: error: the accountant 'toy-raising' (your code, {__name__}) raised ")
        assert error.__name__ in err and "the cache server is down" in err
        assert main(["problem", "toy-broken", "--task", "up", "--out", str(tmp_path / "p.npz")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("dpaudit-mix: error: the world 'toy-broken' (your code") and "KeyError" in err
        assert not (tmp_path / "p.npz").exists()
    finally:
        accounting.ACCOUNTANTS.unregister("toy-raising")
        worlds.WORLDS.unregister("toy-broken")


def test_a_bug_of_the_packages_own_keeps_its_traceback(monkeypatch) -> None:
    """Only a user's registered code is their input: the package's own failure is not hidden."""
    from dpaudit_mix.cli import mixing

    monkeypatch.setattr(mixing, "cmd_calibrate", {}.__getitem__)  # a TypeError in no user's frame
    with pytest.raises(TypeError, match="unhashable"):
        main(["calibrate", "--epsilon", "1", "--delta", "1e-5", "--sample-rate", "1", "--steps", "10"])
