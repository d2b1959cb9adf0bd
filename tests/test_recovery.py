import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import linregress
from scipy.stats import t as t_dist

from dpaudit_mix.base.backend import Backend
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, save
from dpaudit_mix.recovery.grid import Cell, Score, Spread, run_recovery
from dpaudit_mix.recovery.spec import RecoverySpec, load_recovery_spec

from .conftest import random_problem


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    prob = random_problem(600, 6, seed=21, users=True)
    path = tmp_path / "p.npz"
    save(Problem(prob.logp, prob.sources, users=prob.users, task="toy"), path)
    return path


def write_spec(tmp_path: Path, problem_file: Path, text: str = "") -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(
        f'problem = "{problem_file}"\nepsilons = [0.3, 10.0]\nrhos = [0.2, 1.0]\nseeds = 4\nsteps = 40\n'
        f'user_level_tasks = ["toy"]\nk_values = [2, 4, 6]\nk_fit_min = 2\n{text}'
    )
    return path


def test_recovery_cli_writes_every_cell_and_report(capsys, tmp_path: Path, problem_file: Path) -> None:
    out = tmp_path / "out"
    assert main(["recovery", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 0
    result = json.loads((out / "recovery.json").read_text())
    assert {p.name for p in out.iterdir()} >= {
        "recovery.json",
        "report.md",
        "report.html",
        "cos_heatmap.png",
        "alpha_vs_k.png",
    }
    assert len(result["cells"]) == 2 * 2 * 2  # ε × ρ × (example-level, user-level)
    for cell in result["cells"]:
        star = np.array(result["lambda_star"][cell["task"]])
        uniform = np.full(len(star), 1 / len(star))
        # the references, recomputed from λ★ here; and mean λ_DP is no farther from λ★ than the runs
        assert cell["cos_uniform"] == pytest.approx(star.sum() / (np.linalg.norm(star) * np.sqrt(len(star))))
        assert cell["l1_uniform"] == pytest.approx(np.abs(star - uniform).sum())
        assert np.abs(np.array(cell["lambda_dp_mean"]) - star).sum() <= cell["l1"]["mean"] + 1e-9
        assert len(cell["cos_star"]["runs"]) == 4 and cell["cos_star"]["mean"] == pytest.approx(
            np.mean(cell["cos_star"]["runs"])
        )
        assert min(cell["alpha_1e3"]["runs"]) >= -1e-6  # λ★ minimises L on the full data
    assert [a["k"] for a in result["k_scaling"]["average"]] == [2, 4, 6]
    ks = result["k_scaling"]
    assert ks["fit_range"] == [2, 4, 6] and ks["fits"]["all_k"]["points"] == 3
    # the slope and its 95% interval, recomputed by hand from the cells the fit used
    x = np.log([c["k"] for c in ks["cells"]])
    y = np.log([c["alpha_1e3"]["mean"] for c in ks["cells"]])
    line = linregress(x, y)
    half = t_dist.ppf(0.975, len(x) - 2) * line.stderr
    assert ks["slope"] == pytest.approx(line.slope)
    assert ks["slope_ci95"] == pytest.approx([line.slope - half, line.slope + half])
    # the σ = 0 reference: one cell per (task, ρ, level), the bias floor the report shows
    assert len(result["noiseless"]) == 2 * 2 and all(c["noise_multiplier"] == 0 for c in result["noiseless"])
    report = (out / "report.md").read_text()
    assert "| σ = 0 |" in report and "| task | ε |" in report  # the pooled grid and Table 11's per-task rows
    # 4 seeds × 1 task: the Wilcoxon test cannot reach p < 0.125, so nothing is marked, and the report says why
    tables = "".join(line for line in report.splitlines() if line.startswith("|"))
    assert "▲" not in tables and "Low power: 4 seeds" in report and "no cell of the smallest size" in report
    assert report.count("k ≥ k_fit_min (k ≥ 2)") == 1 and "all k" not in report  # one fit, printed once


def test_more_budget_recovers_lambda_star_better(tmp_path: Path, problem_file: Path) -> None:
    """cos★ rises and α falls with ε and with ρ (large gaps, so noise cannot flip them)."""
    result = run_recovery(
        load_recovery_spec(write_spec(tmp_path, problem_file), user_level_tasks=(), k_values=()), progress=False
    )
    cell = {(c.epsilon, c.rho): c.score for c in result.cells}
    for rho in (0.2, 1.0):
        assert cell[(10.0, rho)].cos_star.mean > cell[(0.3, rho)].cos_star.mean
        assert cell[(10.0, rho)].alpha_1e3.mean < cell[(0.3, rho)].alpha_1e3.mean
    assert cell[(10.0, 1.0)].cos_star.mean > 0.99 > cell[(10.0, 1.0)].cos_uniform
    assert cell[(0.3, 1.0)].alpha_1e3.mean < cell[(0.3, 0.2)].alpha_1e3.mean


def test_same_seed_same_result_on_workers_and_dask(tmp_path: Path, problem_file: Path) -> None:
    from dask.distributed import LocalCluster

    spec = load_recovery_spec(write_spec(tmp_path, problem_file))
    first = run_recovery(spec, progress=False)
    assert first.cells and first.noiseless and first.k_scaling["cells"]
    assert first == run_recovery(spec, progress=False)
    assert first == run_recovery(spec, progress=False, backend=Backend(2))
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        dask = Backend.connect("dask", cluster.scheduler_address)
        try:
            assert first == run_recovery(spec, progress=False, backend=dask)
        finally:
            dask.close()


def test_mnist_tasks_and_shards(tmp_path: Path) -> None:
    spec = RecoverySpec(
        tasks=("digit-3",),
        epsilons=(1.0,),
        rhos=(0.1,),
        seeds=2,
        user_level_tasks=(),
        k_values=(2, 4),
        k_tasks=("digit-3",),
        k_fit_min=2,
    )
    result = run_recovery(spec, progress=False)
    assert [c.task for c in result.cells] == ["digit-3"] and result.cells[0].k == 14
    assert [c.k for c in result.k_scaling["cells"]] == [2, 4]


@pytest.mark.parametrize(
    "text, message",
    [
        ("epsilons = []", "ε grid is empty"),
        ("rhos = []", "ρ grid is empty"),
        ("rhos = [0.0]", "rho must be in"),
        ("rhos = [1.5]", "rho must be in"),
        ("epsilons = [-1.0]", "epsilon must be in"),
        ("k_values = [2, 7]", "larger than the 6 public sources"),
        ("tasks = ['nope']", "unknown task"),
        ("colour = 3", "unknown key"),
    ],
)
def test_bad_specs_exit_2_without_output(capsys, tmp_path: Path, problem_file: Path, text: str, message: str) -> None:
    spec = write_spec(tmp_path, problem_file)
    lines = [line for line in spec.read_text().splitlines() if line.split(" =")[0] != text.split(" =")[0]]
    spec.write_text("\n".join(lines + [text]) + "\n")
    out = tmp_path / "out"
    assert main(["recovery", str(spec), "--out", str(out)]) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_mnist_k_beyond_the_shards_is_an_input_error() -> None:
    with pytest.raises(InputError, match="larger than the 64"):
        run_recovery(RecoverySpec(tasks=("digit-0",), k_values=(2, 128), user_level_tasks=()), progress=False)


def test_c_and_eta_are_chosen_on_public_data(small_problem) -> None:
    from dpaudit_mix.tuning import CLIPS, LEARNING_RATES, tune

    choice = tune(small_problem, epsilon=1.0, delta=1e-5, steps=20, sample_rate=1.0, seed=0)
    assert len(choice["candidates"]) == len(CLIPS) * len(LEARNING_RATES)
    best = min(c["alpha_1e3"] for c in choice["candidates"])
    assert {"clip": choice["clip"], "learning_rate": choice["learning_rate"], "alpha_1e3": best} in choice["candidates"]
    assert best >= -1e-6  # λ★ of the public problem is its minimiser
    with pytest.raises(InputError, match="tune_on_public needs an embedded world"):
        RecoverySpec(problem="some/file.npz", tune_on_public=True)


def _holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment, written out here to check the report's (statsmodels) against."""
    order = np.argsort(p)
    stepped = np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order])
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def test_a_mark_is_a_significant_paired_test(tmp_path: Path, problem_file: Path) -> None:
    """Each (ε, ρ, metric) cell's comparison with uniform, recomputed from the runs in recovery.json:
    the paired t-test, the Wilcoxon test below 30 pairs, their larger p, Holm over the level's cells,
    the 95% interval; ▲ exactly where the adjusted p < 0.05 and DP-MixMin is closer to λ★."""
    from scipy.stats import ttest_1samp, wilcoxon

    out = tmp_path / "out"
    spec = write_spec(tmp_path, problem_file, "").read_text().replace("seeds = 4", "seeds = 8")
    (tmp_path / "spec8.toml").write_text(spec.replace("k_values = [2, 4, 6]", "k_values = []"))
    assert main(["recovery", str(tmp_path / "spec8.toml"), "--out", str(out)]) == 0
    result = json.loads((out / "recovery.json").read_text())
    cells = {(c["user_level"], c["epsilon"], c["rho"]): c for c in result["cells"]}
    rows = result["against_uniform"]
    assert len(rows) == len(cells) * 3
    sign = {"cos_star": ("cos_uniform", 1), "l1": ("l1_uniform", -1), "alpha_1e3": ("alpha_uniform_1e3", -1)}
    for row in rows:
        cell = cells[(row["user_level"], row["epsilon"], row["rho"])]
        reference, s = sign[row["metric"]]
        d = s * (np.array(cell[row["metric"]]["runs"]) - cell[reference])
        assert row["pairs"] == 8 and row["mean"] == pytest.approx(d.mean())
        assert row["p_t"] == pytest.approx(ttest_1samp(d, 0.0).pvalue)
        assert row["p_wilcoxon"] == pytest.approx(wilcoxon(d).pvalue)
        assert row["p"] == max(row["p_t"], row["p_wilcoxon"])
        half = t_dist.ppf(0.975, 7) * d.std(ddof=1) / np.sqrt(8)
        assert row["ci95"] == pytest.approx([d.mean() - half, d.mean() + half])
    for level in (False, True):
        for metric in sign:
            family = [r for r in rows if (r["user_level"], r["metric"]) == (level, metric)]
            adjusted = _holm(np.array([r["p"] for r in family]))
            assert [r["p_holm"] for r in family] == pytest.approx(list(adjusted))
    for row in rows:
        assert row["mark"] == ("" if row["p_holm"] >= 0.05 else "▲" if row["mean"] > 0 else "▼")
    marked = [r for r in rows if r["mark"] == "▲"]
    assert marked, "ε = 10 at ρ = 1 recovers λ★ (cos★ > 0.99): eight pairs are enough to mark it"
    # the case the old mark got wrong: DP-MixMin's mean better than uniform, but not significantly
    assert [r for r in rows if r["mean"] > 0 and r["mark"] == ""]
    report = (out / "report.md").read_text()
    tables = "".join(line for line in report.splitlines() if line.startswith("|"))
    assert tables.count("▲") == 2 * len(marked)  # once in the pooled grid, once in the comparisons
    assert "Low power" not in report


def test_the_k_band_is_an_interval_in_log_space(tmp_path: Path, problem_file: Path) -> None:
    """On log axes the band is exp(mean log α ± t·se) over tasks: above zero, around the geometric mean."""
    from dpaudit_mix.recovery.report import _log_interval

    spec = load_recovery_spec(write_spec(tmp_path, problem_file), user_level_tasks=(), epsilons=(1.0,), rhos=(1.0,))
    band = _log_interval(run_recovery(spec, progress=False).k_scaling)
    assert list(band["k"]) == [2, 4, 6]
    assert (band["low"] > 0).all() and (band["low"] <= band["centre"]).all() and (band["centre"] <= band["high"]).all()


def _cell(runs: list[float], uniform: float) -> Cell:
    spread = Spread.of(np.array(runs))
    score = Score(spread, Spread.of(np.zeros(len(runs))), Spread.of(np.zeros(len(runs))), uniform, 0.0, 0.0, ())
    return Cell("toy", 3, 1.0, 0.5, False, 100, None, 1.0, score)


def test_runs_that_beat_uniform_by_the_same_amount_are_as_significant_as_nearly_equal_ones() -> None:
    """No spread leaves the t-test undefined; the Wilcoxon test decides alone, so eight identical
    improvements are marked as eight that differ by a float's last bit are (found by an outside test)."""
    from dpaudit_mix.recovery.comparison import against_uniform

    same = [0.9] * 8
    nudged = [*same[:-1], float(np.nextafter(0.9, 1.0))]
    marks = [next(c for c in against_uniform((_cell(runs, 0.5),)) if c.metric == "cos_star") for runs in (same, nudged)]
    assert [c.mark for c in marks] == ["▲", "▲"]
    assert marks[0].p == pytest.approx(2 / 2**8) and np.isnan(marks[0].p_t) and marks[0].ci95 == (0.4, 0.4)
    assert marks[0].to_dict()["p_t"] is None  # NaN never reaches recovery.json
    broken = next(c for c in against_uniform((_cell([0.9, float("nan")] * 4, 0.5),)) if c.metric == "cos_star")
    assert broken.mark == "" and broken.ci95 is None  # a diverged run: no test, no NaN interval
