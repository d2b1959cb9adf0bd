"""Trust: one budget per sensitive data set across release kinds, a verdict only on what was
claimed, signed releases, a gate that checks its accountant and publishes only what check-release
accepts (docs/concepts/release.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

import dpaudit_mix
from dpaudit_mix import accounting
from dpaudit_mix.base.identity import sensitive_sha256
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.cli import main
from dpaudit_mix.problem import Problem, budget_key, load, save
from dpaudit_mix.release import gate, lambda_kind, ledger, signing
from dpaudit_mix.release.check import LAMBDA_CHECKS
from dpaudit_mix.release.manifest import manifest_digest
from dpaudit_mix.testing import check_mechanism
from dpaudit_mix.testing.failure import CheckFailed

from .conftest import random_problem
from .test_model_release import BARE
from .test_verify import TINY

DELTA = 1e-5


def _draws(name: str, seed: int = 0) -> np.random.Generator:
    return stream(seed, "synthetic-inputs", test="trust", name=name).numpy()


# --- one identity per sensitive data set --------------------------------------------------------


def test_the_identity_of_sensitive_data_survives_order_encoding_and_user_labels() -> None:
    draws = _draws("identity")
    images = (draws.random((40, 28, 28)) * 255).astype(np.uint8)
    labels = np.arange(40) % 3
    users = np.arange(40) // 4
    base = sensitive_sha256(images.astype(np.float32) / 255, labels, users)
    rows = draws.permutation(40)
    assert (
        sensitive_sha256(images[rows].astype(np.float32) / np.float32(255), labels[rows], (users * 7 + 3)[rows]) == base
    )
    assert sensitive_sha256(images[1:].astype(np.float32) / 255, labels[1:], users[1:]) != base  # one example fewer
    assert sensitive_sha256(images.astype(np.float32) / 255, labels) != base  # the users are part of it
    assert sensitive_sha256(images.astype(np.float32) / 255, (labels + 1) % 3, users) != base  # so are the labels


def _world(root: Path, sensitive: int = 160, folder: bool = False) -> Path:
    """A small image world as files: a sensitive set (an .npz, or the same images as a PNG folder),
    its test split and two public sources."""
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    for name, count in (("sensitive", sensitive), ("test", 60), ("a", 120), ("b", 120)):
        draws = _draws(name)
        images = (draws.random((count, 28, 28)) * 255).astype(np.uint8)
        labels = np.arange(count) % 3
        if name == "sensitive" and folder:
            for i in draws.permutation(count):  # another order, another encoding
                (root / "sensitive" / str(labels[i])).mkdir(parents=True, exist_ok=True)
                Image.fromarray(images[i]).save(root / "sensitive" / str(labels[i]) / f"{i:04d}.png")
        else:
            np.savez(root / f"{name}.npz", images=images, labels=labels)
    sensitive_file = "sensitive" if folder else "sensitive.npz"
    path = root / "data.toml"
    path.write_text(
        f'kind = "image"\nname = "trust"\nclasses = 3\nsensitive = "{sensitive_file}"\nsensitive_test = "test.npz"\n'
        '[sources]\na = "a.npz"\nb = "b.npz"\n'
    )
    return path


def test_a_problem_made_from_a_manifest_carries_its_sensitive_datas_identity(tmp_path: Path, capsys) -> None:
    """`problem --data` writes the identity into the file; the same examples as PNG files in
    another order are the same data set; a problem from elsewhere falls back to its rows."""
    keys = []
    for name, folder in (("npz", False), ("png", True)):
        out = tmp_path / f"{name}.npz"
        assert main(["problem", "--data", str(_world(tmp_path / name, folder=folder)), "--out", str(out)]) == 0
        keys.append(budget_key(load(out)))
    capsys.readouterr()
    assert keys[0] == keys[1] and keys[0][1] == "sensitive"
    assert budget_key(random_problem(20, 3, seed=1))[1] == "rows"


def _lambda_spec(path: Path, problem: str, **keys: object) -> Path:
    base = {
        "problem": problem,
        "task": "multiclass",
        "epsilon": 1.0,
        "delta": DELTA,
        "steps": 10,
        "audit_runs": 2000,
        "detect": 2.5,  # what 2000 runs catch at this claim
        "chunk_size": 1024,
        "audit_canaries": ["max_clip"],
        **keys,
    }
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in base.items()))
    return path


def _model_spec(root: Path, data: Path, **keys: object) -> Path:
    pipeline = root / "pipeline.toml"
    settings = {
        "data": str(data),
        "epsilons": [2.0],
        "seeds": 1,
        "methods": ["dpmixmin", "uniform"],
        "pretrain_examples": 100,
        "pretrain_epochs": 1,
        "finetune_epochs": 4,
    }
    pipeline.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    spec = root / "model.toml"
    base = {
        "pipeline": "pipeline.toml",
        "epsilon": 2.0,
        "canaries": 200,
        "detect": 4.0,
        **keys,
    }
    spec.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in base.items()))
    return spec


#: the data set's cap: room for λ at ε = 1 and the model at ε = 2, not for a third release too.
CAP = 2.6


def test_lambda_and_model_releases_on_one_manifest_share_one_budget(tmp_path: Path, monkeypatch, capsys) -> None:
    """A λ release, a model release, then a λ release whose ε keeps the λ releases alone under
    the cap while all three pass it: one ledger entry for the data, the third refused."""
    monkeypatch.setattr(gate, "VERIFY_LEVEL", BARE)
    data = _world(tmp_path / "data")
    first = _lambda_spec(tmp_path / "first.toml", str(data), budget_epsilon=CAP)
    assert main(["release", str(first), "--out", str(tmp_path / "first")]) == 0
    assert main(["release", str(_model_spec(tmp_path, data)), "--out", str(tmp_path / "model")]) == 0
    path = tmp_path / "ledger.sqlite"
    datasets, entries = ledger.read_state(path)
    (key,) = datasets
    assert datasets[key].identity == "sensitive" and {e.kind for e in entries} == {"lambda", "model"}
    assert {e.data_sha256 for e in entries} == {key}
    model = json.loads((tmp_path / "model" / "release.json").read_text())
    assert model["data"] == {"sha256": key, "identity": "sensitive"}
    assert model["budget"]["spent_epsilon"] == pytest.approx(ledger.standing(path, key, "")[0], rel=1e-9)
    lambdas = [e for e in entries if e.kind == "lambda"]
    choice = None
    for epsilon in np.arange(0.3, 2.6, 0.1):
        phase = accounting.GaussianPhase(accounting.calibrate(float(epsilon), DELTA, 1.0, 10), 1.0, 10)
        alone = ledger.spent(lambdas, key, problem_sha256="", delta=DELTA, extra=(phase,), claims=(float(epsilon),))
        together = ledger.spent(entries, key, problem_sha256="", delta=DELTA, extra=(phase,), claims=(float(epsilon),))
        if alone <= CAP < together:
            choice = round(float(epsilon), 1)
            break
    assert choice is not None, "no epsilon separates the λ releases alone from all three"
    third = _lambda_spec(tmp_path / "third.toml", str(data), epsilon=choice)
    capsys.readouterr()
    assert main(["release", str(third), "--out", str(tmp_path / "third")]) == 3
    assert "REFUSED (budget)" in capsys.readouterr().err
    refused = json.loads((tmp_path / "third" / "refused.json").read_text())
    assert refused["stage"] == "budget" and f"over its budget_epsilon {CAP:g}" in refused["reason"]
    assert len(ledger.read(path)) == 2 and not (tmp_path / "third" / "release.json").exists()
    for folder in ("first", "model"):
        assert main(["check-release", str(tmp_path / folder / "release.json"), "--ledger", str(path)]) == 0
        assert json.loads(capsys.readouterr().out)["checked"][:4] == ["digest", "signature", "files", "ledger"]


def test_a_ledger_of_the_earlier_layout_is_migrated_with_its_history(tmp_path: Path, monkeypatch) -> None:
    """A v4 entry keyed by the problem's rows keeps counting when the release of the same rows
    now comes keyed by the sensitive data's identity: re-keyed, its cap carried over."""
    prob = random_problem(60, 3, seed=3)
    path = tmp_path / "ledger.sqlite"
    phase = accounting.GaussianPhase(5.0, 1.0, 10)
    rows = ledger.reserve(
        path,
        data_sha256=budget_key(prob)[0],
        problem_sha256="f" * 64,
        epsilon=1.0,
        delta=DELTA,
        phase=phase,
        user_level=False,
        timestamp="t0",
        budget=10.0,
    )
    ledger.commit(path, rows, "a" * 64)
    identity = "e" * 64
    ledger.reserve(
        path,
        data_sha256=identity,
        problem_sha256="0" * 64,
        epsilon=1.0,
        delta=DELTA,
        phase=phase,
        user_level=False,
        timestamp="t1",
        budget=None,
        aliases=(budget_key(prob)[0],),
        identity="sensitive",
    )
    datasets, entries = ledger.read_state(path)
    assert list(datasets) == [identity] and datasets[identity].budget_epsilon == 10.0
    assert datasets[identity].aliases == (budget_key(prob)[0],) and datasets[identity].since == "t0"
    assert [e.data_sha256 for e in entries] == [identity, identity] and entries[0].manifest_sha256 == "a" * 64
    assert ledger.standing(path, identity, "")[0] == pytest.approx(accounting.epsilon([phase, phase], DELTA))


# --- a verdict only on what was claimed ---------------------------------------------------------


def _pure(mechanism: str, n: int, draws: np.random.Generator, epsilon: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Scores of a pure-ε mechanism on the canary's two neighbours: Laplace (sensitivity 1),
    randomized response (the true bit kept with probability e^ε / (1 + e^ε)), or the exponential
    mechanism choosing one of three outputs with probability ∝ exp(ε u / 2) under utilities of
    sensitivity 1 (the canary moves them from (0, 0, 0) to (−1, 0, 1)); the score is the output."""
    if mechanism == "laplace":
        return draws.laplace(1.0, 1 / epsilon, n), draws.laplace(0.0, 1 / epsilon, n)
    if mechanism == "exponential":
        weights = np.exp(epsilon * np.array([-1.0, 0.0, 1.0]) / 2)
        return draws.choice(3, n, p=weights / weights.sum()).astype(float), draws.choice(3, n).astype(float)
    keep = np.exp(epsilon) / (1 + np.exp(epsilon))
    return (draws.random(n) < keep).astype(float), (draws.random(n) >= keep).astype(float)


@pytest.mark.parametrize("mechanism", ["laplace", "randomized_response", "exponential"])
def test_a_pure_epsilon_mechanism_audited_without_phases_is_flagged_no_more_often_than_the_level(
    mechanism: str,
) -> None:
    """200 honest audits of an exactly pure-ε = 1 mechanism, no phases: violations stay within the
    level (they were 200 of 200 when the GDP curve of ε was taken as the claim)."""
    draws = stream(0, "simulated-scores", test="trust", mechanism=mechanism).numpy()
    flagged = 0
    for _ in range(200):
        result = dpaudit_mix.audit_scores(*_pure(mechanism, 1000, draws), epsilon=1.0, delta=DELTA)
        flagged += result.violation
        assert result.curve == "none" and not result.profile_violation and isinstance(result.gdp_comparison, bool)
    assert flagged <= binom.ppf(0.999, 200, 0.05)
    stated = dpaudit_mix.audit_scores(*_pure(mechanism, 20_000, draws), epsilon=1.0, delta=DELTA, curve="gdp")
    assert stated.curve == "gdp" and stated.gdp_comparison is None  # stated, the GDP curve is tested


def test_check_mechanism_passes_correct_pure_mechanisms_and_fails_half_the_noise() -> None:
    """50 seeds each: Laplace and randomized response at pure ε = 1 pass check_mechanism in
    ≥ 95 % (from 0 of 50); a Laplace mechanism with half the noise fails in every seed."""
    keep = np.e / (1 + np.e)
    passed = {"laplace": 0, "randomized_response": 0}
    for seed in range(50):
        draws = stream(seed, "simulated-scores", test="trust-check-mechanism").numpy()
        mechanisms = {
            "laplace": (lambda d, g=draws: d + g.laplace(0.0, 1.0), (0.0, 1.0)),
            "randomized_response": (lambda b, g=draws: b if g.random() < keep else 1 - b, (0, 1)),
        }
        for name, (release, neighbours) in mechanisms.items():
            try:
                check_mechanism(release, neighbours, epsilon=1.0, delta=DELTA)
                passed[name] += 1
            except CheckFailed:
                pass
        with pytest.raises(CheckFailed):
            check_mechanism(lambda d, g=draws: d + g.laplace(0.0, 0.5), (0.0, 1.0), epsilon=1.0, delta=DELTA)
    assert min(passed.values()) >= 48, passed


# --- signed releases ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One honest λ release for every forgery below."""
    folder = tmp_path_factory.mktemp("signed")
    prob = random_problem(80, 4, seed=7)
    save(Problem(prob.logp, prob.sources, heldout_logp=random_problem(10, 4, seed=8).logp, task="t"), folder / "p.npz")
    spec = _lambda_spec(folder / "spec.toml", str(folder / "p.npz"), task="t", identity="rows")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gate, "VERIFY_LEVEL", TINY)
        patch.setenv("DPAUDIT_MIX_LEDGER", str(folder / "ledger.sqlite"))
        assert main(["release", str(spec), "--out", str(folder / "r")]) == 0
        assert main(["signing-key", "--out", str(folder / "releaser.pem")]) == 0
        assert main(["signing-key", "--out", "/dev/full"]) == 2 and Path("/dev/full").is_char_device()
    return folder / "r" / "release.json"


def _copy(released: Path, into: Path) -> Path:
    """The release folder, copied (its problem file beside it, as the manifest names it)."""
    import shutil

    shutil.copytree(released.parent, into / "r")
    shutil.copy(released.parent.parent / "p.npz", into / "p.npz")
    return into / "r" / "release.json"


def _check(capsys, manifest: Path, *flags: str, ledger_of: Path | None = None) -> tuple[int, dict, str]:
    """check-release against the ledger that released ``ledger_of`` (default: ``manifest``)."""
    capsys.readouterr()
    book = (ledger_of or manifest).parent.parent / "ledger.sqlite"
    code = main(["check-release", str(manifest), "--ledger", str(book), *flags])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_an_untouched_release_checks_here_and_on_another_machine(released: Path, tmp_path: Path, monkeypatch, capsys):
    code, found, _ = _check(capsys, released)
    assert code == 0 and found["ok"] and found["checked"][:4] == ["digest", "signature", "files", "ledger"]
    assert found["checked"][4:] == [
        "ledger chain",
        *LAMBDA_CHECKS,
        "problem (its sha256, sources, data digest and identity)",
    ]
    manifest = json.loads(released.read_text())
    assert manifest["signature"]["fingerprint"] in (released.parent / "release.md").read_text()
    copy = _copy(released, tmp_path)
    key = released.parent.parent / "releaser.pem"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "elsewhere"))  # no key, no ledger of its own
    capsys.readouterr()
    assert main(["check-release", str(copy), "--public-key", str(key)]) == 0
    elsewhere = json.loads(capsys.readouterr().out)
    assert elsewhere["checked"][:3] == ["digest", "signature", "files"] and "records nothing" in elsewhere["notes"][0]
    # no trusted key: integrity only, which is no "ok" (anyone who re-signs names their own key): exit 4
    assert main(["check-release", str(copy)]) == 4
    captured = capsys.readouterr()
    alone = json.loads(captured.out)
    assert not alone["ok"] and alone["signer"] == "unknown" and alone["problems"] == []
    assert "signature (the key it names)" in alone["checked"] and "--public-key" in alone["notes"][0]
    assert "integrity verified, signer unknown: pass --public-key FILE" in captured.err


def test_a_duplicated_key_and_an_unlisted_file_fail_check_release(released: Path, tmp_path: Path, capsys) -> None:
    """A release.json with "weights" twice, forged first and the signed ones last (a reader that
    keeps the first key sees other λ than the signature covers): exit 3, naming the key. A file
    the manifest does not list beside it (a CSV of ids): exit 3, naming the file."""
    copy = _copy(released, tmp_path)
    text = copy.read_text()
    signed = json.loads(text)["weights"]
    forged = json.dumps([signed[1], signed[0], *signed[2:]])
    copy.write_text(text.replace('"weights":', f'"weights": {forged}, "weights":', 1))
    assert json.loads(copy.read_text())["weights"] == signed  # Python keeps the last: the signed λ
    code, found, _ = _check(capsys, copy, ledger_of=released)
    assert code == 3 and not found["ok"] and "['weights'] appear more than once" in found["problems"][0]
    copy.write_text(text)
    (copy.parent / "ids.csv").write_text("id\n17\n")
    code, found, _ = _check(capsys, copy, ledger_of=released)
    assert code == 3 and any(p.startswith("files: ids.csv lies in the release folder") for p in found["problems"])


def _forged(manifest: dict) -> dict:
    """Two released weights swapped, the digest recomputed (what the package's own function gives)."""
    weights = manifest["weights"]
    weights[0], weights[1] = weights[1], weights[0]
    manifest["manifest_sha256"] = manifest_digest(manifest)
    return manifest


def test_a_rehashed_forgery_fails_by_its_signature_and_a_resigned_one_by_the_ledger(
    released: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    copy = _copy(released, tmp_path)
    forged = _forged(json.loads(copy.read_text()))
    copy.write_text(json.dumps(forged))
    code, found, err = _check(capsys, copy, ledger_of=released)
    assert code == 3 and any(p.startswith("signature: it does not match") for p in found["problems"]), err
    monkeypatch.setenv("DPAUDIT_MIX_SIGNING_KEY", str(tmp_path / "forger.pem"))  # the forger's own key
    forged["signature"] = signing.sign({k: v for k, v in forged.items() if k != "signature"})
    copy.write_text(json.dumps(forged))
    monkeypatch.delenv("DPAUDIT_MIX_SIGNING_KEY")
    code, found, _ = _check(capsys, copy, ledger_of=released)
    assert code == 3 and any("not by the trusted key" in p for p in found["problems"])
    assert any(p.startswith("ledger:") for p in found["problems"])
    monkeypatch.setenv("DPAUDIT_MIX_SIGNING_KEY", str(tmp_path / "forger.pem"))
    assert main(["signing-key", "--out", str(tmp_path / "forger.pub")]) == 0
    monkeypatch.delenv("DPAUDIT_MIX_SIGNING_KEY")
    code, found, _ = _check(
        capsys, copy, "--public-key", str(tmp_path / "forger.pub"), ledger_of=released
    )  # the forger's key trusted: the ledger still says no
    assert code == 3 and [p for p in found["problems"] if not p.startswith("ledger:")] == []


@pytest.mark.parametrize("edit", ["card", "figure", "other-card", "budget", "outside"])
def test_what_a_person_reads_is_covered_by_the_signature(released: Path, tmp_path: Path, capsys, edit: str) -> None:
    copy = _copy(released, tmp_path)
    folder = copy.parent
    if edit == "card":
        text = (folder / "release.md").read_text().replace("(1, 1e-05)-DP", "(0.1, 1e-05)-DP")
        assert "(0.1, 1e-05)-DP" in text
        (folder / "release.md").write_text(text)
    elif edit == "figure":
        (folder / "lambda.png").write_bytes((folder / "tradeoff.png").read_bytes())
    elif edit == "other-card":  # another release's card, copied in
        (folder / "release.html").write_text((folder / "release.html").read_text().replace("Release ", "Release x"))
    else:
        manifest = json.loads(copy.read_text())
        if edit == "budget":
            manifest["budget"]["spent_epsilon"] = 0.01
        else:
            manifest["files"]["../p.npz"] = manifest["files"].pop("lambda.png")
        manifest["manifest_sha256"] = manifest_digest(manifest)
        manifest["signature"] = signing.sign({k: v for k, v in manifest.items() if k != "signature"})  # this machine
        copy.write_text(json.dumps(manifest))
    code, found, err = _check(capsys, copy, ledger_of=released)
    expected = "ledger:" if edit == "budget" else "files:"  # an edited budget is not the manifest the ledger committed
    assert code == 3 and any(p.startswith(expected) for p in found["problems"]), found
    assert "check-release FAILED" in err


def test_a_manifest_cannot_make_check_release_read_any_file(released: Path, tmp_path: Path, capsys) -> None:
    copy = _copy(released, tmp_path)
    manifest = json.loads(copy.read_text())
    manifest["inputs"]["problem"] = "/etc/passwd"
    manifest["manifest_sha256"] = manifest_digest(manifest)
    copy.write_text(json.dumps(manifest))
    code, found, _ = _check(capsys, copy, ledger_of=released)
    assert code == 3 and any("lies outside the release folder's parent" in p for p in found["problems"])


# --- the gate checks the accountant it calibrates with --------------------------------------------


@dataclass(frozen=True)
class Scaled:
    """dp_accounting's PLD ε times ``factor``: a liar below 1, a conservative accountant above."""

    name: str
    factor: float

    def epsilon(self, phases, delta: float) -> float:  # type: ignore[no-untyped-def]
        return accounting.epsilon(phases, delta, "pld") * self.factor


def test_an_accountant_that_under_reports_is_refused_before_the_audit(tmp_path: Path, monkeypatch, capsys) -> None:
    """A registered accountant reporting PLD / 1.6: refused at the verification stage, before any
    audit run, nothing charged; one that over-reports (× 1.5) is allowed, and the manifest says so."""
    monkeypatch.setattr(gate, "VERIFY_LEVEL", TINY)
    prob = random_problem(80, 4, seed=7)
    save(Problem(prob.logp, prob.sources, task="t"), tmp_path / "p.npz")
    accounting.register_accountant("liar", Scaled("liar", 1 / 1.6))
    accounting.register_accountant("careful", Scaled("careful", 1.5))
    try:
        audited = lambda_kind.run_audit
        monkeypatch.setattr(lambda_kind, "run_audit", lambda *a, **k: pytest.fail("the audit ran"))
        spec = _lambda_spec(
            tmp_path / "liar.toml", str(tmp_path / "p.npz"), task="t", accountant="liar", identity="rows"
        )
        assert main(["release", str(spec), "--out", str(tmp_path / "liar")]) == 3
        err = capsys.readouterr().err
        assert "REFUSED (verification)" in err and "under-reports" in err and "PLD gives" in err
        assert ledger.read(tmp_path / "ledger.sqlite") == []
        monkeypatch.setattr(lambda_kind, "run_audit", audited)
        spec = _lambda_spec(  # its larger σ leaves 2000 runs catching σ/4 (σ/3 is flagged 0.90 of the time: the edge)
            tmp_path / "careful.toml",
            str(tmp_path / "p.npz"),
            task="t",
            accountant="careful",
            detect=4.0,
            identity="rows",
        )
        assert main(["release", str(spec), "--out", str(tmp_path / "careful")]) == 0
        check = json.loads((tmp_path / "careful" / "release.json").read_text())["verification"]["accountant_check"]
        assert check["over_reports"] and check["grid"] == "passed check_accountant's quick grid"
        assert check["epsilon"] == pytest.approx(1.5 * check["pld_epsilon"], rel=1e-9)
    finally:
        accounting.ACCOUNTANTS.unregister("liar")
        accounting.ACCOUNTANTS.unregister("careful")


def test_an_identity_a_file_cannot_shed_or_forge(tmp_path: Path, capsys, monkeypatch) -> None:
    """A problem made by `problem --data` carries its data's identity signed with its rows: the
    gate keys it by that identity. Stripped of it, with another data set's identity written in, or
    re-signed by a key nobody trusts, it is refused (exit 2) before anything is spent; with
    identity = "rows" the spec keys it by its rows, and the card says so."""
    import dataclasses

    from dpaudit_mix.release import provenance

    monkeypatch.setattr(gate, "VERIFY_LEVEL", TINY)
    made = tmp_path / "made.npz"
    assert main(["problem", "--data", str(_world(tmp_path / "data")), "--out", str(made)]) == 0
    capsys.readouterr()
    prob = load(made)
    trusted = {signing.fingerprint(signing.signing_key().public_key()): signing.signing_key().public_key()}
    assert provenance.verified(prob, trusted) == ""
    identity = prob.meta["sensitive_sha256"]
    other = ("a" if identity[0] != "a" else "b") + identity[1:]
    import os

    home = os.environ["XDG_STATE_HOME"]
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "stranger"))
    resigned = provenance.sealed(prob)  # another machine's key, which neither this one nor its ledger trusts
    monkeypatch.setenv("XDG_STATE_HOME", home)
    bare = {k: v for k, v in prob.meta.items() if k != "sensitive_sha256" and not k.startswith("identity_")}
    cases = {
        "stripped": (dataclasses.replace(prob, meta=bare), "carries no identity"),
        "forged": (dataclasses.replace(prob, meta={**prob.meta, "sensitive_sha256": other}), "does not hold"),
        "re-signed": (resigned, "neither this machine nor the ledger trusts"),
    }
    for name, (changed, said) in cases.items():
        save(changed, tmp_path / f"{name}.npz")
        spec = _lambda_spec(tmp_path / f"{name}.toml", str(tmp_path / f"{name}.npz"))
        assert main(["release", str(spec), "--out", str(tmp_path / name)]) == 2, name
        assert said in capsys.readouterr().err, name
    assert ledger.read() == []
    rows = _lambda_spec(tmp_path / "rows.toml", str(tmp_path / "stripped.npz"), identity="rows")
    assert main(["release", str(rows), "--out", str(tmp_path / "rows")]) == 0
    manifest = json.loads((tmp_path / "rows" / "release.json").read_text())
    assert manifest["data"]["identity"] == "rows"
    assert "identity: this file's rows only" in (tmp_path / "rows" / "release.md").read_text()
