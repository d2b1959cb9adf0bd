import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpaudit_mix import accounting
from dpaudit_mix.base.backend import Backend
from dpaudit_mix.base.randomness import Key, stream
from dpaudit_mix.base.specfile import load_spec_file
from dpaudit_mix.cli import main
from dpaudit_mix.models import cnn, networks
from dpaudit_mix.pipeline.methods import LOSS_BOUND, _candidate_losses, choose
from dpaudit_mix.pipeline.run import build_world, run_pipeline
from dpaudit_mix.pipeline.spec import DEFAULT_METHODS, PipelineSpec

from .conftest import TINY_PIPELINE as TINY
from .conftest import random_problem

QUICK = Path(__file__).parent.parent / "pipeline" / "quick.toml"


def test_quick_spec_end_to_end(capsys, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["pipeline", str(QUICK), "--out", str(out)]) == 0
    frame = pd.read_csv(out / "results.csv")
    assert set(frame["method"]) == set(DEFAULT_METHODS) and len(frame) == len(DEFAULT_METHODS) * 1 * 1 * 12
    assert set(frame["task"]) == {f"digit-{d}" for d in range(10)} | {"macro", "multiclass"}
    private = frame[frame["releasable"]]
    assert (private["epsilon_total"] <= private["epsilon"]).all()
    assert not frame[frame["method"] == "nonprivate_mixmin"]["releasable"].any()
    digits = frame[frame["task"].str.startswith("digit-")].groupby(["method", "epsilon", "seed"])["value"].mean()
    macro = frame[frame["task"] == "macro"].set_index(["method", "epsilon", "seed"])["value"]
    assert np.allclose(macro.loc[digits.index], digits)  # macro AUC is the mean of the per-digit AUCs
    assert (macro.drop("no_pretrain", level="method") > 0.85).all()  # every pretrained model learned the digits
    assert (frame[frame["method"] == "no_pretrain"]["relative_gain"] == 0).all()
    report = (out / "report.md").read_text()
    assert "NOT releasable" in report and "DP-MixMin" in report
    assert {p.name for p in out.iterdir()} >= {
        "results.csv",
        "report.md",
        "report.html",
        "macro_auc_vs_epsilon.png",
        "relative_gain.png",
        "models",
    }
    # every run's finetuned model, loaded without pickle, scores what the run recorded
    index = json.loads((out / "models" / "index.json").read_text())
    assert {e["method"] for e in index} == set(DEFAULT_METHODS) and all(e["outputs"] == 10 for e in index)
    assert [e["method"] for e in index if not e["releasable"]] == ["nonprivate_mixmin"]
    entry = next(e for e in index if e["method"] == "dpmixmin")
    world = build_world(load_spec_file(PipelineSpec, QUICK))
    model = networks.load_model(out / "models" / entry["file"])
    assert cnn.evaluate(model, world.test_images, world.test_labels)["macro_auc"] == entry["metrics"]["macro_auc"]
    said = capsys.readouterr().out
    assert main(["pipeline", str(QUICK), "--out", str(out)]) == 0  # finished: said again, nothing recomputed
    assert capsys.readouterr().out == said


def _dicts(runs: list) -> list[dict]:
    return [run.to_dict() for run in runs]


def test_rerun_skips_finished_stages_and_same_seed_same_result(tmp_path: Path, monkeypatch) -> None:
    spec = PipelineSpec(methods=("dpmixmin", "no_pretrain"), **TINY)
    first = run_pipeline(spec, tmp_path / "a", progress=False)

    def forbidden(*args, **kwargs):
        raise AssertionError("a cached stage was recomputed")

    with monkeypatch.context() as m:
        m.setattr(cnn, "pretrain", forbidden)
        m.setattr(cnn, "dp_finetune", forbidden)
        assert _dicts(run_pipeline(spec, tmp_path / "a", progress=False)) == _dicts(first)
    assert _dicts(run_pipeline(spec, tmp_path / "b", progress=False)) == _dicts(first)


def test_sequential_composition_spends_the_budget_once(tmp_path: Path) -> None:
    spec = PipelineSpec(methods=("dpmixmin",), composition="sequential", **TINY)
    run = run_pipeline(spec, tmp_path, progress=False)[0]
    phases = [run.mixture.phase, accounting.GaussianPhase(**run.result["finetune_phase"])]
    total = accounting.epsilon(phases, spec.delta)
    assert run.privacy.epsilon_total == pytest.approx(total) and 0.95 * 2.0 <= total <= 2.0
    assert accounting.epsilon(phases[:1], spec.delta) < 2.0 * spec.mix_share + 1e-9


def test_random_search_selects_privately_and_accounts_for_it() -> None:
    problem = random_problem(300, 5, seed=2)
    spec = PipelineSpec(search_candidates=6)
    precise = choose(
        "random_search", split_a=problem, full=problem, epsilon=20.0, spec=spec, seed=0, names={"task": "t"}
    )
    candidates = (
        stream(spec.seed, "random-search-candidates", task="t", epsilon=20.0, seed=0)
        .numpy()
        .dirichlet(np.ones(5), size=6)
    )
    best = candidates[np.argmin(_candidate_losses(problem, candidates, False, LOSS_BOUND).sum(axis=0))]
    assert np.allclose(precise.weights, best)  # at huge ε the noisy choice is the true best
    cheap = choose("random_search", split_a=problem, full=problem, epsilon=0.5, spec=spec, seed=0, names={"task": "t"})
    assert cheap.phase.steps == 1 and accounting.epsilon([cheap.phase], spec.delta) <= 0.5


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"public_fraction": 0.01}, "public source mnist-tiny has no examples"),
        ({"rho": 0.0}, "rho must be in (0, 1)"),
        ({"rho": 1.0}, "rho must be in (0, 1)"),
        ({"sensitive_fraction": 0.001, "rho": 0.1}, "split A would be empty"),
        ({"sensitive_fraction": 0.001, "rho": 0.9}, "split B would be empty"),
        ({"epsilons": [0.0]}, "epsilon must be in"),
        ({"methods": ["dpmixmin", "magic"]}, "unknown method(s) magic"),
    ],
)
def test_bad_specs_exit_2_without_output(capsys, tmp_path: Path, keys: dict, message: str) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text("\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in keys.items()) + "\n")
    out = tmp_path / "out"
    assert main(["pipeline", str(spec), "--out", str(out)]) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_world_splits_are_disjoint() -> None:
    world = build_world(PipelineSpec(sensitive_fraction=0.5))
    assert len(np.intersect1d(world.split_a, world.split_b)) == 0
    assert len(world.split_a) + len(world.split_b) == len(world.train_labels) == 1200


def test_any_subset_of_methods_renders(capsys, tmp_path: Path) -> None:
    """No no_pretrain (the relative-gain base) and no random search or upper bound to compare with."""
    spec = tmp_path / "subset.toml"
    spec.write_text(
        'methods = ["dpmixmin", "uniform"]\n'
        + "".join(f"{key} = {list(value) if isinstance(value, tuple) else value}\n" for key, value in TINY.items())
    )
    out = tmp_path / "out"
    assert main(["pipeline", str(spec), "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["dpmixmin_minus"]) == {"uniform"}
    assert set(pd.read_csv(out / "results.csv")["method"]) == {"dpmixmin", "uniform"}
    assert "DP-MixMin" in (out / "report.md").read_text() and not (out / "relative_gain.png").exists()


def test_secure_runs_draw_fresh_noise_and_stay_within_the_budget(tmp_path: Path) -> None:
    spec = PipelineSpec(methods=("dpmixmin", "random_search"), **TINY)
    first = run_pipeline(spec, tmp_path / "a", progress=False, secure=True)
    second = run_pipeline(spec, tmp_path / "b", progress=False, secure=True)
    for a, b in zip(first, second, strict=True):
        # random search may well pick the same candidate twice; DP-MixMin's λ is continuous
        assert a.secure and (a.job.method != "dpmixmin" or not np.array_equal(a.mixture.weights, b.mixture.weights))
        assert a.result["metrics"] != b.result["metrics"]  # the finetune's noise and batches are fresh too
        assert a.privacy.releasable and a.privacy.epsilon_total <= spec.epsilons[0]


def test_finetune_hyper_parameters_are_chosen_on_public_data(tmp_path: Path) -> None:
    spec = PipelineSpec(methods=("uniform", "warm"), finetune_learning_rates=(0.02, 0.2), **TINY)
    record, warm = _dicts(run_pipeline(spec, tmp_path, progress=False))
    assert warm["mixture"]["weights"] is None and warm["releasable"]  # pretrained on the public slice alone
    assert len(list((tmp_path / "cache" / "pretrain").glob("*.npz"))) == 2
    choice = record["finetune_choice"]
    scores = {(c["learning_rate"], c["epochs"]): c["macro_auc"] for c in choice["validation_macro_auc"]}
    assert set(scores) == {(0.02, 1), (0.2, 1)}
    assert scores[(choice["learning_rate"], choice["epochs"])] == max(scores.values())
    assert record["epsilon_total"] <= 2.0  # the rehearsals ran on public data: no extra privacy


def _spec_file(path: Path, **keys: object) -> Path:
    def toml(value: object) -> str:
        if isinstance(value, (tuple, list)):
            return "[" + ", ".join(toml(v) for v in value) + "]"
        return f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)

    path.write_text("".join(f"{key} = {toml(value)}\n" for key, value in keys.items()))
    return path


@pytest.mark.long
@pytest.mark.parametrize("proxies", [("logistic",), pytest.param(("logistic", "cnn"), marks=pytest.mark.full)])
def test_tiny_factorial_runs_every_cell_and_tests_its_endpoints_across_rows(
    capsys, tmp_path: Path, proxies: tuple[str, ...]
) -> None:
    """pipeline/factorial.toml at toy sizes: proxy × protocol rows, per-task λ for every digit in
    mixtures.json, and the three endpoints per row, Holm-corrected across the rows (two in
    ``make test``, the CNN proxy's two more in ``make full``)."""
    keys = {**TINY, "epsilons": (1.0,), "seeds": 2, "pretrain_examples": 200, "finetune_rows": 512}
    spec = _spec_file(
        tmp_path / "factorial.toml",
        world="mnist-shift",
        methods=("dpmixmin", "uniform", "nonprivate_mixmin"),
        proxies=proxies,
        protocols=("multiclass", "per_task"),
        proxy_epochs=1,
        **keys,
    )
    out = tmp_path / "out"
    assert main(["pipeline", str(spec), "--out", str(out)]) == 0
    endpoints = json.loads(capsys.readouterr().out)["endpoints"]
    cells = {f"proxy = {p}, protocol = {c}" for p in proxies for c in ("multiclass", "per_task")}
    assert set(endpoints) == {"lambda_star_minus_uniform", "dpmixmin_minus_uniform", "dpmixmin_minus_lambda_star"}
    assert all(set(by_row) == cells for by_row in endpoints.values())
    entries = json.loads((out / "mixtures.json").read_text())
    tasks = {(e["row"], e["method"], e["seed"]): set() for e in entries}
    for e in entries:
        tasks[(e["row"], e["method"], e["seed"])].add(e["task"])
        assert len(e["weights"]) == 21 and abs(sum(e["weights"]) - 1) < 1e-9
    digits = {f"digit-{d}" for d in range(10)}
    assert len(tasks) == len(cells) * 3 * 2
    assert all(found == (digits if "per_task" in row else {"multiclass"}) for (row, _, _), found in tasks.items())
    per_task = [e["weights"] for e in entries if e["row"].endswith("per_task") and e["method"] == "dpmixmin"]
    assert len({tuple(w) for w in per_task}) == len(per_task)  # every task's private λ is its own
    report = (out / "report.md").read_text()
    assert "p (Holm, across rows)" in report and "cos(λ_DP, λ★)" in report
    cell = out / "rows" / f"proxy-{proxies[-1]}_protocol-per_task"
    assert "all tasks' λ together" in (cell / "report.md").read_text()
    assert json.loads((cell / "mixtures.json").read_text()) == [
        {k: v for k, v in e.items() if k != "row"}
        for e in entries
        if e["row"] == f"proxy = {proxies[-1]}, protocol = per_task"
    ]


class _NothingToSend(Backend):
    """A backend that fails if any task is sent to it."""

    def unordered(self, fn: Any, items: Any, prefer: Any = "processes", shared: Any = ()) -> Any:
        assert not items, f"{len(items)} finished seed(s) were sent to workers again"
        yield from ()


@pytest.mark.long
def test_workers_and_dask_compute_the_same_results_as_one_process(tmp_path: Path) -> None:
    from dask.distributed import LocalCluster

    spec = PipelineSpec(methods=("dpmixmin", "uniform"), **{**TINY, "seeds": 2})
    one = _dicts(run_pipeline(spec, tmp_path / "one", progress=False))
    assert _dicts(run_pipeline(spec, tmp_path / "two", progress=False, backend=Backend(2))) == one
    # two tasks in one worker process's threads: the stages still run one at a time, on one thread
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        dask = Backend.connect("dask", cluster.scheduler_address)
        try:
            assert _dicts(run_pipeline(spec, tmp_path / "dask", progress=False, backend=dask)) == one
        finally:
            dask.close()
    # the workers' stages landed in the run's cache: a rerun sends nothing and reads the same runs
    assert _dicts(run_pipeline(spec, tmp_path / "dask", progress=False, backend=_NothingToSend(2))) == one


def test_rows_are_the_product_of_the_list_keys_and_each_a_valid_spec() -> None:
    from dpaudit_mix.lm.spec import TextPipelineSpec
    from dpaudit_mix.pipeline.spec import variants

    rows = variants(PipelineSpec(proxies=("logistic", "cnn"), rhos=(0.1, 0.3), proxy_epochs=2))
    assert [r.label for r in rows] == [
        "proxy = logistic, rho = 0.1",
        "proxy = logistic, rho = 0.3",
        "proxy = cnn, rho = 0.1",
        "proxy = cnn, rho = 0.3",
    ]
    assert [(r.spec.proxy_epochs, r.spec.rho, r.spec.rhos, r.spec.proxies) for r in rows[1:3]] == [
        (None, 0.3, None, None),  # proxy_epochs belongs to the CNN rows
        (2, 0.1, None, None),
    ]
    assert variants(PipelineSpec()) == []
    text = variants(TextPipelineSpec(rhos=(0.1, 0.2, 0.3)))
    assert [r.spec.rho for r in text] == [0.1, 0.2, 0.3] and text[0].folder == "rho-0.1"


def test_a_per_task_model_starts_from_the_pretrained_head() -> None:
    """digit-d versus rest: p(d) of the binary model equals the 10-class model's when the other
    digits' logits are equal (and is close otherwise); no pretraining gives a fresh binary head."""
    from dpaudit_mix.base.randomness import Key

    arrays = cnn.state_arrays(cnn.from_arrays(None, Key(0)))
    rng = stream(1, "synthetic-inputs", test="binary-head").numpy()
    arrays["head.weight"][np.arange(10) != 3] = rng.standard_normal(784).astype(np.float32) * 0.05
    arrays["head.bias"][np.arange(10) != 3] = 0.2
    images = rng.standard_normal((40, 28, 28)).astype(np.float32)
    ten = cnn.class_probabilities(cnn.from_arrays(arrays, Key(0)), images)[:, 3]
    two = cnn.class_probabilities(cnn.from_arrays(arrays, Key(0), "digit-3"), images)[:, 1]
    assert np.allclose(ten, two, atol=1e-5)
    assert cnn.from_arrays(None, Key(0), "digit-3").head.out_features == 2


def test_lambda_star_is_solved_once_per_problem(monkeypatch) -> None:
    """Every seed and ε of a task mixes the same full problem: λ★ is solved once (it takes seconds)."""
    from dpaudit_mix.pipeline import methods

    calls: list[int] = []
    solve = methods.mixmin
    monkeypatch.setattr(methods, "mixmin", lambda logp: calls.append(1) or solve(logp))
    monkeypatch.setattr(methods, "_OPTIMA", {})  # what other tests in this process solved is not counted
    problem = random_problem(300, 5, seed=21)
    first = methods.optimum(problem)
    first[0] = 99.0  # a caller's copy: the remembered λ★ is not changed through it
    again = methods.optimum(problem)
    assert len(calls) == 1 and np.allclose(again, solve(problem.logp).weights)
    methods.optimum(random_problem(300, 5, seed=22))
    assert len(calls) == 2


def test_a_finetunes_epsilon_is_what_its_opacus_accountant_counted_asked_once(monkeypatch) -> None:
    """The finetune's ε is its Opacus accountant's answer; a second finetune that took the same
    steps gets the same answer without asking Opacus' PRV again (a second each)."""
    from opacus.accountants import PRVAccountant

    images = stream(0, "simulated-scores", test="finetune-epsilon").numpy().random((40, 28, 28)).astype(np.float32)
    labels = np.arange(40) % 2
    asked: list[float] = []
    answer = PRVAccountant.get_epsilon

    def counted(self: PRVAccountant, delta: float, **options: Any) -> float:
        asked.append(delta)
        return answer(self, delta, **options)

    monkeypatch.setattr(PRVAccountant, "get_epsilon", counted)
    epsilons = []
    for seed in range(2):
        key = Key(0).child(test="finetune-epsilon", seed=seed)
        seen: list[Any] = []
        model = cnn.from_arrays(None, key, "digit-1")
        tuned = cnn.dp_finetune(
            model,
            images,
            labels,
            epsilon=2.0,
            delta=1e-5,
            epochs=1,
            batch=10,
            learning_rate=0.1,
            clip=1.0,
            key=key,
            on_private=seen.append,
        )
        epsilons.append(tuned.opacus_epsilon)
    assert len(asked) == 1 and epsilons[0] == epsilons[1] <= 2.0
    assert epsilons[0] == answer(seen[0].engine.accountant, 1e-5)  # Opacus' own answer, to the bit
