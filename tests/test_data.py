import numpy as np

from dpaudit_mix.data import registry
from dpaudit_mix.data.sources import mnist_world
from dpaudit_mix.mixmin import mixmin


def test_mnist_world_is_deterministic_and_disjoint() -> None:
    sources, sensitive = mnist_world(0)
    again, _ = mnist_world(0)
    assert len(sources) == 14 and len({s.name for s in sources}) == 14
    assert all(len(s.labels) > 0 for s in sources)
    np.testing.assert_array_equal(sources[6].images, again[6].images)
    assert len(sensitive.train_labels) == 2400 and len(sensitive.test_labels) == 600


def test_lambda_star_far_from_uniform_on_most_tasks() -> None:
    cosines = []
    for task in registry.tasks("mnist"):
        prob = registry.build("mnist", task)
        assert prob.k == 14 and prob.heldout_logp.shape == (600, 14) and prob.users is not None
        star = mixmin(prob.logp).weights
        cosines.append(star.sum() / (np.linalg.norm(star) * np.sqrt(prob.k)))
    assert np.mean(np.array(cosines) < 0.6) >= 0.8
