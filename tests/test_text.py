"""The shakespeare-users text world: n-gram proxies, the split by speaker, the problem file."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit_mix.audit.many_run.engine import run_audit
from dpaudit_mix.audit.mixmin_canaries import black_box_scores, natural_canary, natural_canary_index
from dpaudit_mix.audit.spec import AuditSpec
from dpaudit_mix.base.alphabet import ALPHABET, OTHER, V, encode
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.data import registry
from dpaudit_mix.data.ngram import CharNGram
from dpaudit_mix.data.text import text_world
from dpaudit_mix.learner import SHIPPED, LearnerConfig, _canary_gradient, clipped_gradient_sum, fit
from dpaudit_mix.optimum import mixmin
from dpaudit_mix.pipeline.methods import _candidate_losses
from dpaudit_mix.problem import Problem


def test_witten_bell_probabilities_sum_to_one_in_every_context() -> None:
    model = CharNGram.fit(["to be or not to be", "that is the question", "whether 'tis nobler"], order=3)
    for history in ("to b", "xq", "", "the"):
        # log P(c | history) for every symbol c: score "history + c" and take the last character's term
        logs = []
        for code in range(1, V):
            c = ALPHABET[code - 1] if code < OTHER else "#"
            both = model.mean_log_likelihood([history + c])[0] * (len(history) + 1)
            alone = model.mean_log_likelihood([history])[0] * len(history) if history else 0.0
            logs.append(both - alone)
        assert np.exp(logs).sum() == pytest.approx(1.0, abs=1e-9)


def test_encoding_maps_everything_onto_the_alphabet() -> None:
    codes = encode("Hark! Ünïcödé 42\n")
    assert codes.min() >= 1 and codes.max() <= OTHER and codes[0] == codes[1] + 7  # "h" is "a" + 7


def test_the_text_world_splits_by_speaker_and_its_problem_has_users() -> None:
    sources, train, test = text_world(0)
    assert len(sources) == 10 and all(len(s.texts) > 1000 for s in sources)
    assert len(train.texts) == len(train.users) and len(test.texts) > 0
    prob = registry.build("shakespeare-users", "lm")
    assert prob.n == len(train.texts) and prob.k == 10 and prob.users is not None
    assert len(np.unique(prob.users)) > 100 and prob.heldout_logp.shape[0] == len(test.texts)
    assert np.array_equal(prob.heldout_users, test.users)  # the natural canary of a user-level audit
    star = mixmin(prob.logp).weights
    shakespeare = [i for i, name in enumerate(prob.sources) if name.startswith("shakespeare-")]
    assert star[shakespeare].sum() > 0.99  # other genres fit comedies; BBC news does not
    with pytest.raises(Exception, match="shakespeare-users is no image world"):
        registry.world_sources("shakespeare-users", 0)


def _user_problem(seed: int = 0) -> Problem:
    """Four training users of 1–6 rows and three held-out users of 1, 4 and 9 rows."""
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(4), [1, 3, 6, 2])
    held_users = np.repeat([7, 8, 9], [1, 4, 9])
    logp = lambda n: np.log(rng.dirichlet(np.ones(5), size=n))  # noqa: E731
    return Problem(
        logp(len(users)), tuple("abcde"), users=users, heldout_logp=logp(len(held_users)), heldout_users=held_users
    )


def test_a_held_out_user_canary_is_clipped_like_any_user() -> None:
    """The natural user canary: all rows of one held-out user, summed and clipped as one unit,
    exactly as the learner treats a training user; its black-box score sums the rows."""
    prob = _user_problem()
    index = natural_canary_index(prob, "index", clip=3.0, index=2, user_level=True)
    canary = natural_canary(prob, index, user_level=True)
    assert canary.logp.shape == (9, 5)
    lam = np.random.default_rng(1).dirichlet(np.ones(5), size=3).T  # (k, R)
    for clip in (0.1, 100.0):  # clipping binding, and not
        alone = Problem(canary.logp, prob.sources, users=np.zeros(9, dtype=np.int64))
        expected = clipped_gradient_sum(alone, lam, clip, user_level=True)
        assert np.allclose(
            _canary_gradient(canary, lam.astype(np.float32), clip, SHIPPED), expected, rtol=1e-4, atol=1e-6
        )
    weights = lam.T
    rows = np.log(weights @ np.exp(canary.logp).T).sum(axis=1)
    assert np.allclose(black_box_scores(canary, weights), rows)
    strongest = natural_canary_index(prob, "most_influential", clip=1e6, user_level=True)
    assert strongest in (0, 1, 2)
    with pytest.raises(InputError, match="user-level DP"):
        fit(prob, LearnerConfig(steps=2), 2, stream(0, "learner-noise"), canary=canary)


def test_random_search_at_user_level_scores_each_user_once() -> None:
    prob = _user_problem()
    candidates = np.random.default_rng(2).dirichlet(np.ones(5), size=3)
    per_user = _candidate_losses(prob, candidates, True, 50.0)
    per_example = _candidate_losses(prob, candidates, False, 50.0)
    assert per_user.shape == (4, 3)
    assert np.allclose(per_user[2], per_example[prob.users == 2].mean(axis=0))
    assert _candidate_losses(prob, candidates, True, 0.5).max() <= 0.5  # clipped to B: sensitivity B per user


def test_user_level_audit_plants_a_whole_held_out_speaker(tmp_path) -> None:
    """The text audit's natural canary is one held-out speaker with all of their speeches, and its
    σ = 0 control sees it (the attack, not only the learner, handles a many-row canary)."""
    spec = AuditSpec(
        problem="shakespeare-users",
        task="lm",
        user_level=True,
        rho=0.2,
        steps=20,
        runs=256,
        canaries=("natural",),
        threats=("white_box",),
    )
    summary = run_audit(spec, tmp_path / "audit", progress=False).summary
    prob = registry.build("shakespeare-users", "lm")
    speaker = np.unique(prob.heldout_users)[summary.canaries["natural"]["heldout_index"]]
    assert summary.canaries["natural"]["examples"] == int(np.sum(prob.heldout_users == speaker)) > 1
    control = next(r for r in summary.results if not r.noise)
    assert control.exceeds_claim and not summary.inconclusive
