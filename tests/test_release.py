"""The release gate: honest releases pass and re-verify; leaks, tampering and budget are refused."""

import json
import os
from pathlib import Path

import dp_accounting
import numpy as np
import pytest

from dpaudit_mix import accounting, learner
from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, load, save
from dpaudit_mix.release import check, gate, ledger
from dpaudit_mix.release.manifest import manifest_digest

from .conftest import random_problem
from .test_verify import TINY

EPS, DELTA, STEPS = 1.0, 1e-5, 10


@pytest.fixture(autouse=True)
def tiny_verification(monkeypatch) -> None:
    monkeypatch.setattr(gate, "VERIFY_LEVEL", TINY)


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    prob = random_problem(80, 4, seed=7)
    path = tmp_path / "p.npz"
    save(Problem(prob.logp, prob.sources, heldout_logp=random_problem(10, 4, seed=8).logp, task="t"), path)
    return path


def write_spec(tmp_path: Path, problem_file: Path, name: str = "spec.toml", **keys) -> Path:
    base = {
        "problem": str(problem_file),
        "epsilon": EPS,
        "delta": DELTA,
        "steps": STEPS,
        "audit_runs": 2000,
        "detect": 2.5,  # what 2000 runs catch (2.0 takes 4000: the power tests below)
        "chunk_size": 1024,
        "identity": "rows",  # a problem file made here, not by `dpaudit-mix problem`: keyed by its rows
        **keys,
    }
    path = tmp_path / name
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in base.items()))
    return path


def holds_weights(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and b"weights" in p.read_bytes()]


def test_honest_release_passes_and_checks(tmp_path: Path, problem_file: Path, capsys) -> None:
    out = tmp_path / "r"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 0
    manifest = json.loads((out / "release.json").read_text())
    assert len(manifest["weights"]) == 4 and abs(sum(manifest["weights"]) - 1) < 1e-9
    assert set(manifest["claim"]["epsilon_by_accountant"]) == set(accounting.BUILTIN_ACCOUNTANTS)
    assert manifest["audit"]["violation"] is False and manifest["verification"]["passed"]
    assert {r["canary"] for r in manifest["audit"]["results"]} == {"max_clip", "natural"}
    assert manifest["manifest_sha256"] == manifest_digest(manifest)
    for name in ("release.md", "release.html", "lambda.png"):
        assert (out / name).stat().st_size > 0
    assert not (out / "refused.json").exists()
    said = capsys.readouterr().err.strip().splitlines()[-1]  # one human line beside the JSON
    assert said.startswith("dpaudit-mix: released λ over 4 sources at (1, 1e-05)-DP, example-level; spent ε ")
    assert said.endswith(f" of no cap on this data set; card {out / 'release.html'}")
    assert main(["check-release", str(out / "release.json")]) == 0


def test_the_release_audit_runs_alongside_the_verification(tmp_path: Path, problem_file: Path, monkeypatch) -> None:
    """A child computes the audit's runs while the verification runs: once the verification has
    passed, the audit in this process finds every chunk done and computes none itself."""
    from dpaudit_mix.audit.many_run import engine

    verify = gate.verify

    def verify_then_forbid_runs(*args, **kwargs):
        result = verify(*args, **kwargs)
        # from here on (after the child was forked) this process may not compute a chunk
        monkeypatch.setattr(engine, "_collect_chunk", lambda *a: pytest.fail("the audit ran after the verification"))
        return result

    monkeypatch.setattr(gate, "verify", verify_then_forbid_runs)
    out = tmp_path / "r"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 0
    assert json.loads((out / "release.json").read_text())["audit"]["results"][0]["runs"] == 2000


def test_tampering_is_detected(tmp_path: Path, problem_file: Path, capsys) -> None:
    out = tmp_path / "r"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 0
    manifest_path = out / "release.json"
    original = manifest_path.read_text()
    edited = json.loads(original)
    edited["claim"]["noise_multiplier"] *= 1.0001  # one number
    manifest_path.write_text(json.dumps(edited))
    assert main(["check-release", str(manifest_path)]) == 3
    assert "manifest_sha256" in capsys.readouterr().err
    manifest_path.write_text(original)
    data = bytearray(problem_file.read_bytes())
    data[len(data) // 2] ^= 1  # one byte of the problem file
    problem_file.write_bytes(bytes(data))
    assert main(["check-release", str(manifest_path)]) == 3
    assert "sha256" in capsys.readouterr().err


def test_a_2x_leak_behind_the_verification_is_refused_by_the_audit(
    tmp_path: Path, problem_file: Path, monkeypatch, capsys
) -> None:
    """A learner that adds half the noise while the verification still sees the shipped one: the
    audit of the exact configuration refuses it, and nothing holding λ is left."""
    shipped = learner.SHIPPED
    halved = learner.Privatiser(noise_scale=lambda sigma_clip, k: shipped.noise_scale(sigma_clip, k) / 2)
    verify = gate.verify

    def verify_the_shipped_learner(*args, **kwargs):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(learner, "SHIPPED", shipped)
            return verify(*args, **kwargs)

    monkeypatch.setattr(gate, "verify", verify_the_shipped_learner)
    monkeypatch.setattr(learner, "SHIPPED", halved)
    out = tmp_path / "leak"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 3
    captured = capsys.readouterr()
    assert "REFUSED (audit)" in captured.err and "weights" not in captured.out
    assert json.loads((out / "refused.json").read_text())["stage"] == "audit"
    assert not (out / "release.json").exists() and holds_weights(out) == []
    assert ledger.read(tmp_path / "ledger.sqlite") == []  # the reservation was withdrawn: nothing was spent


def test_a_noise_multiplier_below_the_calibrated_one_is_refused_before_anything_is_spent(
    tmp_path: Path, problem_file: Path, capsys
) -> None:
    """`release --noise-multiplier σ/1.6` would publish a claim its noise does not give (check-release
    rejects it): refused at once, exit 3, no release.json, nothing charged; a larger σ goes out."""
    sigma = accounting.calibrate(EPS, DELTA, 1.0, STEPS)
    out = tmp_path / "quiet"
    spec = write_spec(tmp_path, problem_file)
    assert main(["release", str(spec), "--out", str(out), "--noise-multiplier", str(sigma / 1.6)]) == 3
    assert "REFUSED (claim)" in capsys.readouterr().err
    assert json.loads((out / "refused.json").read_text())["stage"] == "claim"
    assert not (out / "release.json").exists() and ledger.read(tmp_path / "ledger.sqlite") == []
    louder = tmp_path / "louder"
    assert main(["release", str(spec), "--out", str(louder), "--noise-multiplier", str(sigma * 1.25)]) == 0
    manifest = json.loads((louder / "release.json").read_text())
    assert manifest["claim"]["noise_multiplier"] == pytest.approx(sigma * 1.25)
    capsys.readouterr()
    assert main(["check-release", str(louder / "release.json")]) == 0


def test_an_audit_too_small_for_its_detect_is_refused_before_anything_is_spent(
    tmp_path: Path, problem_file: Path, monkeypatch, capsys
) -> None:
    """audit_runs = 2000 catches σ/2.5 at this claim, not the σ/2 of ``detect = 2``: refused at
    stage power, naming the runs that would (4000), before the verification, the ledger or any
    run; without audit_runs the gate plans them, records the power, and check-release recomputes
    it (a manifest that says its audit caught more than it could is a finding)."""
    monkeypatch.setattr(gate, "verify", lambda *a, **k: pytest.fail("the verification ran before the power check"))
    out = tmp_path / "weak"
    assert main(["release", str(write_spec(tmp_path, problem_file, detect=2.0)), "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert "REFUSED (power)" in err and "audit_runs = 2000 catches σ/2.5" in err and "audit_runs = 4000 would" in err
    assert json.loads((out / "refused.json").read_text())["stage"] == "power"
    assert not (out / "release.json").exists() and ledger.read(tmp_path / "ledger.sqlite") == []
    monkeypatch.undo()
    monkeypatch.setattr(gate, "VERIFY_LEVEL", TINY)
    planned = tmp_path / "planned"
    spec = write_spec(tmp_path, problem_file, "planned.toml", detect=2.0, audit_runs=None)
    spec.write_text("\n".join(line for line in spec.read_text().splitlines() if not line.startswith("audit_runs")))
    assert main(["release", str(spec), "--out", str(planned)]) == 0
    manifest = json.loads((planned / "release.json").read_text())
    audit = manifest["audit"]
    assert audit["runs"] == 4000 and audit["planned"] and audit["detect"] == 2.0
    assert all(r["runs"] == 4000 for r in audit["results"]) and audit["power"]["detects"] <= 2.0
    assert check.check_release(planned / "release.json") == []
    forged = {**manifest, "audit": {**audit, "power": {**audit["power"], "detects": 1.5}}}
    found = check.check_manifest(forged, planned, None, check.trust(None, tmp_path / "ledger.sqlite")).problems
    assert any("recorded power is not" in p for p in found), found
    weaker = {**manifest, "audit": {**audit, "detect": 1.5}}
    found = check.check_manifest(weaker, planned, None, check.trust(None, tmp_path / "ledger.sqlite")).problems
    assert any("short of its detect = 1.5" in p for p in found), found


def test_a_patched_learner_is_refused(tmp_path: Path, problem_file: Path, monkeypatch, capsys) -> None:
    """A bug shipped in the learner's DP step (half the noise) is refused by the gate's checks."""
    shipped = learner.SHIPPED.noise_scale
    halved = learner.Privatiser(noise_scale=lambda sigma_clip, k: shipped(sigma_clip, k) / 2)
    monkeypatch.setattr(learner, "SHIPPED", halved)
    out = tmp_path / "patched"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 3
    assert "REFUSED" in capsys.readouterr().err
    assert holds_weights(out) == [] and (out / "refused.json").exists()


def test_ledger_composes_in_pld_and_enforces_the_budget(tmp_path: Path, problem_file: Path, capsys) -> None:
    spec = write_spec(tmp_path, problem_file, budget_epsilon=1.2)
    assert main(["release", str(spec), "--out", str(tmp_path / "first")]) == 0
    assert main(["release", str(spec), "--out", str(tmp_path / "second")]) == 3
    assert "REFUSED (budget)" in capsys.readouterr().err
    assert json.loads((tmp_path / "second" / "refused.json").read_text())["stage"] == "budget"
    entries = ledger.read(tmp_path / "ledger.sqlite")
    assert len(entries) == 1 and entries[0].status == "released"
    manifest = json.loads((tmp_path / "first" / "release.json").read_text())
    assert entries[0].manifest_sha256 == manifest["manifest_sha256"] == manifest_digest(manifest)
    sigma = entries[0].noise_multiplier
    # the ledger composes two releases of one (σ, q) as 2T steps of it (exactly the same
    # mechanism; one PLD composition however long the history): dp_accounting's PLD of that event,
    # and within its discretisation of the two events composed one after the other
    merged, pld = dp_accounting.pld.PLDAccountant(), dp_accounting.pld.PLDAccountant()
    merged.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), 2 * STEPS))
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), STEPS)
    pld.compose(dp_accounting.ComposedDpEvent([event, event]))
    phase = accounting.GaussianPhase(sigma, 1.0, STEPS)
    composed = ledger.spent(entries, entries[0].data_sha256, problem_sha256="", delta=DELTA, extra=(phase,))
    assert composed == pytest.approx(merged.get_epsilon(DELTA), rel=1e-9) and composed > 1.2
    assert composed == pytest.approx(pld.get_epsilon(DELTA), rel=1e-6)


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"epsilon": -1.0}, "epsilon"),
        ({"audit_canaries": ["golden"]}, "audit_canaries"),
        (
            {"audit_canaries": ["max_clip", "max_clip"]},
            "audit_canaries must name some of ('natural', 'max_clip'), each once",
        ),
        ({"accountant": "magic"}, "accountant"),
        ({"budget_epsilon": 0.5}, "budget_epsilon"),
        ({"problem": "/no/such.npz"}, "neither an embedded problem"),
    ],
)
def test_bad_release_specs_exit_2(tmp_path: Path, problem_file: Path, capsys, keys: dict, message: str) -> None:
    out = tmp_path / "bad"
    assert main(["release", str(write_spec(tmp_path, problem_file, **keys)), "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert holds_weights(out) == [] and json.loads((out / "refused.json").read_text())["exit_code"] == 2


def test_check_release_on_garbage(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "release.json"
    bad.write_text("{not json")
    assert main(["check-release", str(bad)]) == 2
    assert main(["check-release", str(tmp_path / "missing.json")]) == 2


def test_a_release_folder_holds_only_what_may_be_published(tmp_path: Path, problem_file: Path) -> None:
    """Published or refused, the folder holds no sensitive array (no problem file, no audit
    scores or chunks) and no absolute path; check-release finds the problem from the manifest's
    relative path, and an embedded problem by rebuilding it."""
    out = tmp_path / "r"
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(out)]) == 0
    refused = tmp_path / "refused"
    sigma = accounting.calibrate(EPS, DELTA, 1.0, STEPS)
    spec = write_spec(tmp_path, problem_file, name="leak.toml")
    assert main(["release", str(spec), "--out", str(refused), "--noise-multiplier", str(sigma / 2)]) == 3
    published = {p.name for p in out.rglob("*")}
    card = {"release.md", "release.html", "lambda.png", "tradeoff.png", ".release.owned"}
    assert published == {"release.json", *card}
    assert {p.name for p in refused.rglob("*")} <= {"refused.json", "tradeoff.png"}
    logp = load(problem_file).logp
    cache = os.environ["DPAUDIT_MIX_CACHE"]
    needles = [p.encode() for p in (str(tmp_path), cache)] + [logp[0, 0].tobytes(), repr(float(logp[0, 0])).encode()]
    for folder in (out, refused):
        for path in folder.rglob("*"):
            assert not any(needle in path.read_bytes() for needle in needles), path
    assert json.loads((out / "release.json").read_text())["inputs"]["problem"] == "../p.npz"
    assert set(ledger.state().outs.values()) == {str(out.resolve())}  # the ledger's own (refused before reserving)
    assert check.check_release(out / "release.json") == []


def test_an_embedded_release_is_rechecked_by_rebuilding_its_problem(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        "\n".join(
            [
                'problem = "mnist"',
                'task = "digit-3"',
                f"epsilon = {EPS}",
                f"delta = {DELTA}",
                f"steps = {STEPS}",
                "audit_runs = 2000",
                "detect = 2.5",
                "chunk_size = 1024",
            ]
        )
    )
    out = tmp_path / "r"
    assert main(["release", str(spec), "--out", str(out)]) == 0
    assert not (out / "problem.npz").exists()
    assert json.loads((out / "release.json").read_text())["inputs"]["problem"] == "embedded:mnist"
    assert check.check_release(out / "release.json") == []


def test_a_data_sets_budget_cannot_be_walked_around(tmp_path: Path, problem_file: Path, capsys) -> None:
    """After a release with budget_epsilon 1.2: a spec with a larger cap, one with none, one at
    δ = 0.5, and the same rows in another order (as float32, sources reordered) are all refused;
    the card and stdout say what was spent of what."""
    first = write_spec(tmp_path, problem_file, budget_epsilon=1.2)
    assert main(["release", str(first), "--out", str(tmp_path / "first")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["budget_epsilon"] == 1.2 and 0.99 <= printed["spent_epsilon"] <= 1.0
    assert "of 1.2 (example-level) on this data" in (tmp_path / "first" / "release.md").read_text()
    prob = load(problem_file)
    rows = np.random.default_rng(0).permutation(prob.n)
    moved = tmp_path / "moved.npz"
    save(
        Problem(
            prob.logp[rows][:, ::-1].astype(np.float32), prob.sources[::-1], heldout_logp=prob.heldout_logp[:, ::-1]
        ),
        moved,
    )
    attempts = {
        "larger cap": write_spec(tmp_path, problem_file, "larger.toml", budget_epsilon=100.0),
        "no cap": write_spec(tmp_path, problem_file, "none.toml"),
        "delta 0.5": write_spec(tmp_path, problem_file, "delta.toml", delta=0.5),
        "moved rows": write_spec(tmp_path, moved, "moved.toml"),
    }
    for name, spec in attempts.items():
        assert main(["release", str(spec), "--out", str(tmp_path / name.replace(" ", "-"))]) == 3, name
        assert "REFUSED (budget)" in capsys.readouterr().err, name
    assert len(ledger.read(tmp_path / "ledger.sqlite")) == 1


def test_a_natural_canary_without_held_out_rows_is_refused_before_the_verification(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    prob = random_problem(80, 4, seed=7)
    bare = tmp_path / "bare.npz"
    save(Problem(prob.logp, prob.sources, task="t"), bare)

    def not_yet(*args, **kwargs):
        raise AssertionError("verify-accountant ran before the audit's input checks")

    monkeypatch.setattr(gate, "verify", not_yet)
    out = tmp_path / "r"
    spec = write_spec(tmp_path, bare, audit_canaries=["natural"])
    assert main(["release", str(spec), "--out", str(out)]) == 2
    assert "a natural canary needs 'heldout_logp'" in capsys.readouterr().err
    assert not (out / "release.json").exists() and ledger.read(tmp_path / "ledger.sqlite") == []  # nothing spent


def test_a_bad_key_an_unpublishable_out_or_a_bad_audit_key_is_refused_before_any_work(
    tmp_path: Path, problem_file: Path, capsys, monkeypatch
) -> None:
    """Each is one line and exit 2 before the verification's minute, and none touches the ledger:
    a signing key others can read (it was opened only to sign, after the audit); an --out that is
    the folder holding the key or the ledger (the release folder is published whole); a spec key
    of the audit (chunk_size = 0) that was checked only after the ledger's reservation; a spec
    that names a ledger of its own (each new file would be a fresh cap)."""
    import time

    key = tmp_path / "keys" / "release-signing-key.pem"
    monkeypatch.setenv("DPAUDIT_MIX_SIGNING_KEY", str(key))
    started = time.monotonic()
    key.parent.mkdir()
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    key.chmod(0o644)
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(tmp_path / "a")]) == 2
    assert "can be read by others" in capsys.readouterr().err
    key.unlink()
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(key.parent)]) == 2
    assert "is the folder of" in capsys.readouterr().err and not (key.parent / "refused.json").exists()
    assert main(["release", str(write_spec(tmp_path, problem_file)), "--out", str(tmp_path)]) == 2  # holds the ledger
    spec = write_spec(tmp_path, problem_file, chunk_size=0)
    assert main(["release", str(spec), "--out", str(tmp_path / "b")]) == 2
    assert "chunk_size must be >= 1" in capsys.readouterr().err
    mine = write_spec(tmp_path, problem_file, ledger=str(tmp_path / "mine.sqlite"))  # a fresh cap of its own
    assert main(["release", str(mine), "--out", str(tmp_path / "c")]) == 2
    assert "$DPAUDIT_MIX_LEDGER or --ledger" in capsys.readouterr().err
    assert time.monotonic() - started < 60 and not (tmp_path / "ledger.sqlite").exists()


def test_an_example_and_a_user_level_release_do_not_compose_as_one(tmp_path: Path, capsys, monkeypatch) -> None:
    """Example level, then user level, on one data set with cap 1.5: composed as one relation the
    two would read "1.465 of 1.5", though with users of 2 rows the first is worth more at user
    level. The second is refused (exit 3, stage budget), naming the units; nothing is charged."""
    monkeypatch.setattr(gate, "VERIFY_LEVEL", TINY)
    prob = random_problem(80, 4, seed=7)
    path = tmp_path / "users.npz"
    save(Problem(prob.logp, prob.sources, users=np.arange(80) // 2, task="t"), path)
    example = write_spec(tmp_path, path, budget_epsilon=1.5, audit_canaries=["max_clip"])
    assert main(["release", str(example), "--out", str(tmp_path / "example")]) == 0
    user = write_spec(tmp_path, path, "user.toml", budget_epsilon=1.5, audit_canaries=["max_clip"], user_level=True)
    assert main(["release", str(user), "--out", str(tmp_path / "user")]) == 3
    err = capsys.readouterr().err
    assert "REFUSED (budget)" in err and "releases are at example level" in err and "1.465" not in err
    assert [e.user_level for e in ledger.read()] == [False]
