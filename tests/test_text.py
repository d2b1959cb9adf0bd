"""The shakespeare-users text world: n-gram proxies, the split by speaker, the problem file."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit_mix.data import registry
from dpaudit_mix.data.ngram import ALPHABET, OTHER, V, CharNGram, encode
from dpaudit_mix.data.text import text_world
from dpaudit_mix.mixmin import mixmin


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
    star = mixmin(prob.logp).weights
    shakespeare = [i for i, name in enumerate(prob.sources) if name.startswith("shakespeare-")]
    assert star[shakespeare].sum() > 0.99  # other genres fit comedies; BBC news does not
    with pytest.raises(Exception, match="text world"):
        registry.world_sources("shakespeare-users", 0)
