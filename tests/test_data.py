import numpy as np

from dpaudit_mix.data import registry
from dpaudit_mix.data.sources import mnist_world
from dpaudit_mix.optimum import mixmin


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


def test_mnist_shift_sources_cover_every_digit_and_lambda_star_is_interior() -> None:
    from dpaudit_mix.data.shift import shift_world

    sources, sensitive, validation = shift_world(0)
    digits = [s for s in sources if not s.name.startswith("animals")]
    assert len(sources) == 21 and all(set(s.labels) == set(range(10)) for s in digits)
    assert {s.name for s in sources} >= {"uci", "animals-a", "animals-b"}
    # the validation slice is public and in-distribution, and disjoint from the sensitive data
    private = {image.tobytes() for image in np.concatenate([sensitive.train_images, sensitive.test_images])}
    assert len(validation.labels) == 500 and not {image.tobytes() for image in validation.images} & private
    interior = 0
    for task in registry.tasks("mnist-shift"):
        star = mixmin(registry.build("mnist-shift", task).logp).weights
        interior += star.max() <= 0.7 and (star > 0.05).sum() >= 3
        names = registry.build("mnist-shift", task).sources
        assert star[[names.index("animals-a"), names.index("animals-b")]].sum() < 0.01  # distractors avoided
    assert interior >= 10  # measured: 10 of 11 tasks (digit-1 puts 0.78 on elastic-2)


def test_world_names_and_the_old_alias() -> None:
    assert registry.canonical("mnist") == "mnist-labels"
    old = registry.build("mnist", "digit-3")
    new = registry.build("mnist-labels", "digit-3")
    np.testing.assert_array_equal(old.logp, new.logp)
    assert old.meta["name"] == "mnist-labels"


def test_the_mnist_csv_is_parsed_by_rows_of_784_pixels_and_a_label(tmp_path, monkeypatch) -> None:
    """The CSV read with numpy's parser: pixels scaled to [0, 1] as 28×28 images, the last column
    the label; a file of other rows is one clear error, not a reshape traceback."""
    import gzip

    import pytest

    from dpaudit_mix.base.errors import InputError
    from dpaudit_mix.data import images

    rows = np.zeros((2, 785))
    rows[0, :784], rows[:, 784] = np.arange(784) % 256, [7, 3]
    good, bad = tmp_path / "good.csv.gz", tmp_path / "bad.csv.gz"
    with gzip.open(good, "wt") as f:
        np.savetxt(f, rows, delimiter=",", fmt="%d")
    with gzip.open(bad, "wt") as f:
        f.write("1,2,3\n4,5,6\n")
    try:
        for path in (good, bad):
            monkeypatch.setattr(images, "_mnist_csv", lambda path=path: path)
            images._parsed_mnist.cache_clear()
            if path is bad:
                with pytest.raises(InputError, match="not MNIST rows of 784 pixels and a label"):
                    images._parsed_mnist()
                continue
            x, y = images._parsed_mnist()
            assert x.shape == (2, 28, 28) and x.dtype == np.float32 and y.tolist() == [7, 3]
            np.testing.assert_allclose(x[0].ravel(), (np.arange(784) % 256) / 255.0, rtol=1e-6)
    finally:  # no other test may see these rows as MNIST
        images._parsed_mnist.cache_clear()


def test_an_embedded_problem_is_the_same_bytes_on_any_number_of_blas_threads(tmp_path, monkeypatch) -> None:
    """``check-release`` rebuilds an embedded problem and compares its sha256. Its logistic proxies
    trained with OpenBLAS on 2 threads (a 2-core machine's CLI) and on 1 (the tests' workers, and
    ``check-release``) differed by up to 4.4 in a log-probability on mnist/digit-0, so an honest
    release failed its check on a fresh cache; built on one thread, it is one problem."""
    from threadpoolctl import threadpool_limits

    from dpaudit_mix import problem as problem_io
    from dpaudit_mix.base.cache import sha256_bytes

    digests = []
    try:
        for threads in (2, 1):
            monkeypatch.setenv("DPAUDIT_MIX_CACHE", str(tmp_path / f"cache-{threads}"))
            registry.world_probabilities.cache_clear()
            with threadpool_limits(threads):
                digests.append(sha256_bytes(problem_io.dumps(registry.build("mnist", "digit-0"))))
    finally:
        registry.world_probabilities.cache_clear()  # no entry of these caches outlives the test
    assert digests[0] == digests[1]
