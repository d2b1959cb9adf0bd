"""The text track's model and user-level DP-SGD (docs/concepts/pipeline.md): sensitivity, noise, pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dpaudit_mix.base.alphabet import V
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import Key, stream
from dpaudit_mix.cli import main
from dpaudit_mix.lm.run import TextTrack, build_text_world
from dpaudit_mix.lm.spec import TextPipelineSpec, load_text_pipeline_spec
from dpaudit_mix.models import chargru as lm
from dpaudit_mix.models.cnn import state_arrays
from dpaudit_mix.models.userdp import UserLevelSGD, clip_rows, noisy_mean, released_step, train, user_gradient
from dpaudit_mix.pipeline.methods import Mixture
from dpaudit_mix.pipeline.stages import KINDS, Job

KEY = Key(0).child(test="lm")


class Silent:
    """A random source whose Gaussians are all 0 and whose uniforms are all 0 (every user sampled):
    the released step is then the exact clipped sum over users / qU."""

    def standard_normal(self, size):
        return np.zeros(size)

    def random(self, size):
        return np.zeros(size)


def _users(seed: int, sizes: list[int]) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.integers(1, lm.V, size=(m, lm.WINDOW + 1))) for m in sizes]


def test_windows_predict_every_character_once() -> None:
    text = "a" * 100
    w = lm.windows(text)
    assert w.shape[1] == lm.WINDOW + 1 and w[0, 0] == 0  # starts with the start symbol
    assert int((w[:, 1:] >= 0).sum()) == len(text)
    assert np.array_equal(w[1:, 0], w[:-1, -1])  # consecutive windows overlap by one code


def test_all_windows_lays_out_each_text_as_its_own_windows() -> None:
    """The windows of many texts at once equal each text's, laid out one by one by the rule
    (start code, codes, −1 padding; windows of WINDOW + 1 codes overlapping by one), for texts
    of no character, one, exactly a window, one more, and with characters whose lower case is
    longer (İ) or depends on the next one (Σ)."""
    from dpaudit_mix.base.alphabet import encode

    texts = ["", "a", "b" * lm.WINDOW, "c" * (lm.WINDOW + 1), "İstanbul ΟΔΟΣ", "to be, or not to be" * 9]
    each = []
    for text in texts:
        sequence = [0, *encode(text).tolist()]
        count = max(1, -(-(len(sequence) - 1) // lm.WINDOW))
        sequence += [-1] * (count * lm.WINDOW + 1 - len(sequence))
        each.append(np.array([sequence[i * lm.WINDOW : i * lm.WINDOW + lm.WINDOW + 1] for i in range(count)]))
    got = lm.all_windows(texts)
    assert got.dtype == np.int64 and np.array_equal(got, np.concatenate(each))
    assert [len(w) for w in each] == [1, 1, 1, 2, 1, 4]
    assert all(np.array_equal(lm.windows(t), w) for t, w in zip(texts, each, strict=True))


def test_user_with_many_examples_moves_a_step_by_at_most_clip() -> None:
    """Per-step sensitivity, directly: adding a user with 300 windows (its raw summed gradient far
    above C) changes the released sum by exactly C, and by at most C for any user."""
    model = lm.new_model(KEY)
    base = _users(1, [3, 5, 2, 7])
    heavy = _users(2, [300])[0]
    light = _users(3, [1])[0]
    config = UserLevelSGD(
        sample_rate=1.0, steps=1, noise_multiplier=1.0, clip=0.5, learning_rate=1e-3, windows_per_user=1000
    )
    assert float(user_gradient(model, heavy).norm()) > 10 * config.clip

    def released_sum(users: list[torch.Tensor]) -> torch.Tensor:
        return released_step(model, users, config, Silent(), Silent()) * config.sample_rate * len(users)

    without = released_sum(base)
    change_heavy = float((released_sum([*base, heavy]) - without).norm())
    change_light = float((released_sum([*base, light]) - without).norm())
    assert change_heavy == pytest.approx(config.clip, rel=1e-4)
    assert change_light <= config.clip * (1 + 1e-5)


def test_window_cap_keeps_the_bound_and_the_cost() -> None:
    """With windows_per_user = 4 a step reads 4 of the heavy user's windows, still clipped to C."""
    model = lm.new_model(KEY)
    heavy = _users(4, [200])[0]
    config = UserLevelSGD(1.0, 1, 1.0, 0.5, 1e-3, windows_per_user=4)
    step = released_step(
        model, [heavy], config, KEY.stream("finetune-batches").numpy(), KEY.stream("finetune-noise").numpy()
    )
    assert step.shape == (sum(p.numel() for p in model.parameters()),)
    zero_noise = released_step(model, [heavy], config, KEY.stream("finetune-batches").numpy(), Silent())
    assert float(zero_noise.norm()) <= config.clip * (1 + 1e-5)


def test_noise_standard_deviation_is_sigma_clip() -> None:
    """N(0, σ²C²) on the sum: Monte Carlo over 20 steps × ~20k coordinates (relative SE ≈ 0.1%)."""
    config = UserLevelSGD(sample_rate=0.25, steps=1, noise_multiplier=2.5, clip=0.8, learning_rate=1e-3)
    users = 40
    size = sum(p.numel() for p in lm.new_model(KEY).parameters())
    per_user = torch.from_numpy(np.random.default_rng(5).normal(size=(7, size))).float()
    exact = noisy_mean(per_user, config, users, Silent())
    rng = np.random.default_rng(6)
    noise = torch.stack([noisy_mean(per_user, config, users, rng) - exact for _ in range(20)])
    noise = noise * config.sample_rate * users  # undo the public divisor qU
    std = float(noise.std())
    assert std == pytest.approx(config.noise_multiplier * config.clip, rel=0.01)
    assert abs(float(noise.mean())) < 0.01 * std
    assert torch.allclose(exact * config.sample_rate * users, clip_rows(per_user, config.clip).sum(dim=0), atol=1e-4)


def test_user_level_sgd_is_reproducible_and_learns() -> None:
    users = [lm.all_windows(["to be or not to be, that is the question. " * 3]) for _ in range(6)]
    config = UserLevelSGD(sample_rate=0.5, steps=15, noise_multiplier=0.5, clip=1.0, learning_rate=1e-2)
    first = train(lm.new_model(KEY), users, config, KEY.child(run=3))
    second = train(lm.new_model(KEY), users, config, KEY.child(run=3))
    assert all(
        torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True)
    )
    test = lm.all_windows(["to be or not to be, that is the question."])
    assert lm.perplexity(first, test) < 0.8 * lm.perplexity(lm.new_model(KEY), test)


def test_pretraining_runs_its_cooldown_at_a_tenth_of_the_rate(monkeypatch) -> None:
    """8 steps (2 epochs of 4 batches) with cooldown 0.3: 6 at the rate, the last round(2.4) = 2
    at a tenth of it."""
    rates: list[float] = []
    real = torch.optim.Adam.step

    def recording(self, *args, **kwargs):
        rates.append(self.param_groups[0]["lr"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording)
    data = lm.all_windows(["to be or not to be, that is the question. " * 12])
    assert len(data) == 11
    lm.pretrain(data, 2, 1e-2, Key(0).child(test="cooldown"), batch=3, cooldown=0.3)
    assert rates == [1e-2] * 6 + [1e-3] * 2


def test_pretraining_pieces_predict_every_character_once_after_the_code_before_them() -> None:
    data = lm.all_windows(["to be or not to be, that is the question. " * 3, "ay"])
    for length in (lm.WINDOW, 24, 16, 1):
        cut = lm.pieces(data, length)
        count = lm.WINDOW // length
        assert cut.shape == (len(data) * count, length + 1)
        for w, window in enumerate(data):
            own = [cut[i * len(data) + w] for i in range(count)]  # piece i of every window, then i + 1
            assert np.array_equal(np.concatenate([piece[1:] for piece in own]), window[1:])
            assert [piece[0] for piece in own] == [window[i * length] for i in range(count)]
    with pytest.raises(InputError, match="must divide the 48-character window"):
        lm.pieces(data, 20)


def test_the_pretraining_key_names_a_sequence_length_other_than_the_window() -> None:
    """A cached pretraining on whole windows is never reused for shorter sequences; whole windows
    keep the keys they had before the length existed."""
    world = SimpleNamespace(split_b=np.arange(4), source_windows=())

    def key(length: int) -> str:
        track = TextTrack(TextPipelineSpec(pretrain_length=length), world, secure=False)  # type: ignore[arg-type]
        stage = track.pretrain(Job("uniform", 1.0, 0, "lm"), Mixture(np.full(10, 0.1), None))
        assert stage is not None
        return stage.key

    assert len({key(lm.WINDOW), key(24), key(16)}) == 3
    assert "length" not in TextTrack(TextPipelineSpec(pretrain_length=lm.WINDOW), world, False).model_ids  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"world": "mnist-shift"}, "text pipeline runs"),
        ({"methods": ("warm",)}, "unknown method"),
        ({"finetune_users": 0.0}, "finetune_users"),
        ({"pretrain_batch": 0}, "pretrain_batch must be >= 1"),
        ({"pretrain_length": 0}, "pretrain_length must be >= 1"),
        ({"pretrain_length": 20}, "pretrain_length must divide the 48-character window"),
        ({"pretrain_length": 96}, "pretrain_length must divide"),
        ({"pretrain_cooldown": 1.0}, r"pretrain_cooldown must be in \[0, 1\)"),
        ({"pretrain_cooldown": -0.1}, r"pretrain_cooldown must be in \[0, 1\)"),
        ({"rho": 1.0}, "rho"),
        ({"rehearsal_genre": "comedies"}, "rehearsal_genre must be a public genre"),
        ({"finetune_learning_rates": (0.0,)}, "finetune_learning_rates must be > 0"),
    ],
)
def test_text_spec_refuses_bad_values(keys: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        TextPipelineSpec(**keys)


@pytest.mark.long
def test_text_pipeline_end_to_end(capsys, tmp_path: Path) -> None:
    """A tiny run through the CLI's ``main`` (in this process, which has imported torch already:
    a child process would import it twice more): report with perplexities and λ★; a rerun
    recomputes nothing. (Half the users a step: a Poisson PLD calibration at q = 0.07 takes twice
    as long as at 0.5.)"""
    spec = tmp_path / "tiny.toml"
    spec.write_text(
        'world = "shakespeare-users"\nepsilons = [2.0]\nseeds = 2\n'
        'methods = ["dpmixmin", "uniform", "no_pretrain", "nonprivate_mixmin"]\n'
        "pretrain_windows = 300\npretrain_epochs = 1\nfinetune_steps = 2\nfinetune_users = 56\n"
        "windows_per_user = 2\nmix_steps = 20\nfinetune_learning_rates = [3e-4, 3e-3]\n"
    )
    out = tmp_path / "out"
    argv = ["pipeline", str(spec), "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runs"] == 8 and "uniform" in summary["dpmixmin_perplexity_reduction_vs"]
    report = (out / "report.md").read_text()
    assert "λ★ (non-private)" in report and "test perplexity" in report
    assert "Adam at 0.03, its last 20% of steps at a tenth of it, sequences of 24 characters, 128 a step" in report
    assert "chosen by rehearsal on public romances speakers" in report  # the fair rule, no privacy spent
    load = KINDS["finetuned"][2]  # the text track keeps each finetune's model beside its result
    choices = [load(p)["finetune_choice"] for p in (out / "cache" / "finetune").glob("*.npz")]
    assert len(choices) == 8 and all(c["learning_rate"] in (3e-4, 3e-3) for c in choices)
    assert all(
        c["learning_rate"] == min(c["rehearsal_perplexity"], key=lambda r: r["perplexity"])["learning_rate"]
        for c in choices
    )
    import pandas as pd

    frame = pd.read_csv(out / "results.csv")
    # every pretrained model predicts better than the uniform character model (perplexity V − 1)
    assert len(frame) == 8 and (frame.loc[frame["method"] != "no_pretrain", "perplexity"] < V - 1).all()
    assert (
        frame.loc[frame["method"] == "no_pretrain", "perplexity"].min()
        > frame.loc[frame["method"] != "no_pretrain", "perplexity"].max()
    )  # pretraining matters
    private = frame[frame["releasable"]]
    assert (private["epsilon_total"] <= 2.0 + 1e-6).all()
    index = json.loads((out / "models" / "index.json").read_text())  # every run's model, loadable
    assert len(index) == 8 and {e["network"] for e in index} == {"chargru"}
    entry = next(e for e in index if e["method"] == "dpmixmin")
    world = build_text_world(load_text_pipeline_spec(spec))
    assert lm.perplexity(lm.load_model(out / "models" / entry["file"]), world.test_windows) == entry["perplexity"]
    stamps = {p: p.stat().st_mtime_ns for p in (out / "cache").rglob("*.*")}
    (out / ".pipeline.finished").unlink()  # without the finished run's stamp: the stage cache's rerun
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "cache").rglob("*.*")} == stamps


def test_the_rows_that_share_a_pretraining_score_it_once(monkeypatch) -> None:
    """Uniform's ε rows finetune the same pretrained weights: its test perplexity is computed once
    in a process, and every row records that same float."""
    rng = stream(0, "synthetic-inputs", test="shared-pretraining").numpy()
    windows = [rng.integers(0, V, (2, lm.WINDOW + 1)) for _ in range(4)]
    test = rng.integers(0, V, (6, lm.WINDOW + 1))
    world = SimpleNamespace(user_windows=windows, split_b=np.arange(4), test_windows=test)
    spec = TextPipelineSpec(epsilons=(1.0, 2.0), finetune_steps=1, finetune_users=4, windows_per_user=1)
    track = TextTrack(spec, world, secure=False)  # type: ignore[arg-type]
    start = state_arrays(lm.new_model(Key(0).child(test="shared-pretraining")))
    scored = []
    real = lm.perplexity

    def counted(model: torch.nn.Module, data: np.ndarray) -> float:
        scored.append(data is test)
        return real(model, data)

    monkeypatch.setattr(lm, "perplexity", counted)
    rows = [track.finetune(Job("uniform", eps, 0, "lm"), start, "pretrained", ()).compute() for eps in (1.0, 2.0)]
    assert scored == [True, True, True]  # the pretrained model once, then each finetune's
    expected = real(lm.from_arrays(start, Key(0)), test)
    assert rows[0]["pretrained_perplexity"] == rows[1]["pretrained_perplexity"] == expected


def _ragged_users(count: int, seed: int) -> list[torch.Tensor]:
    """Users of 1 to 8 random windows; every third user's last window is half padding."""
    rng = stream(seed, "synthetic-inputs", test="ragged-users").numpy()
    users = []
    for u in range(count):
        windows = torch.from_numpy(rng.integers(0, V, (int(rng.integers(1, 9)), lm.WINDOW + 1)))
        if u % 3 == 0:
            windows[-1, lm.WINDOW // 2 :] = -1
        users.append(windows)
    return users


def test_batched_user_gradients_reuse_their_buffers_across_sizes() -> None:
    """The batched pass keeps its buffers between calls: a larger call, a smaller one (ragged and
    not), then the larger again give what fresh buffers and the per-user loop give."""
    from dpaudit_mix.models import userdp

    model = lm.new_model(Key(4))
    large, small = _ragged_users(9, 5), [u[:2] for u in _ragged_users(3, 2)]
    first = userdp.per_user_gradients(model, large)
    for users in (small, [u[:1] for u in small], large):
        batched = userdp.per_user_gradients(model, users)
        loop = torch.stack([user_gradient(model, u) for u in users])
        assert float(((batched - loop).norm(dim=1) / loop.norm(dim=1)).max()) < 1e-5
    assert torch.equal(batched, first)  # the same users give the same result, whatever the buffers held


def test_what_the_batched_pass_was_not_built_for_goes_to_the_per_user_loop() -> None:
    """A float64 CharGRU (the batched pass keeps float32 buffers) gets the per-user loop's answer,
    not an error from the fast path (found by an outside test)."""
    from dpaudit_mix.models import userdp

    model = lm.new_model(Key(6)).double()
    users = _ragged_users(3, 7)
    loop = torch.stack([user_gradient(model, u) for u in users])
    assert torch.equal(userdp.per_user_gradients(model, users), loop)


def test_batched_user_gradients_equal_the_per_user_loop(monkeypatch) -> None:
    """The CharGRU's one-pass per-user gradients, and the step they release on the same draws,
    equal one backward pass per user (to float rounding)."""
    from dpaudit_mix.models import userdp

    model = lm.new_model(Key(3))
    users = _ragged_users(12, 4)
    batched = userdp.per_user_gradients(model, users)
    loop = torch.stack([user_gradient(model, u) for u in users])
    assert batched.shape == loop.shape
    assert float(((batched - loop).norm(dim=1) / loop.norm(dim=1)).max()) < 1e-5
    config = UserLevelSGD(0.6, 1, 1.0, 0.5, 1e-3, windows_per_user=4)
    key = Key(5).child(test="batched")

    def step() -> torch.Tensor:
        return released_step(
            model, users, config, key.stream("finetune-batches").numpy(), key.stream("finetune-noise").numpy()
        )

    fast = step()
    monkeypatch.setattr(userdp, "per_user_gradients", lambda m, us: torch.stack([user_gradient(m, u) for u in us]))
    slow = step()
    assert float((fast - slow).norm() / slow.norm()) < 1e-5
