"""A user's own files (data manifests): the embedded worlds exported to files reproduce the
embedded problems and pipeline bit for bit, and every bad input is exit 2, one line naming the
file and the fault, nothing written."""

from __future__ import annotations

import hashlib
import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dpaudit_mix.base import npz
from dpaudit_mix.base.errors import InputError
from dpaudit_mix.base.randomness import stream
from dpaudit_mix.cli import main
from dpaudit_mix.data import registry
from dpaudit_mix.data.export import export_world
from dpaudit_mix.pipeline.spec import PipelineSpec


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export")
    return {name: export_world(name, root / name) for name in ("mnist-shift", "shakespeare-users")}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", ["mnist-shift", "shakespeare-users"])
def test_an_exported_world_builds_the_embedded_problem_byte_for_byte(exported, tmp_path: Path, name: str, capsys):
    assert main(["problem", name, "--out", str(tmp_path / "embedded.npz")]) == 0
    capsys.readouterr()
    assert main(["problem", "--data", str(exported[name]), "--out", str(tmp_path / "files.npz")]) == 0
    assert _sha(tmp_path / "embedded.npz") == _sha(tmp_path / "files.npz")
    summary = json.loads(capsys.readouterr().out)
    assert summary["problem"] == str(exported[name]) and len(summary["lambda_star"]) == summary["k"]


SMALL_PIPELINE = """epsilons = [1.0]
seeds = 1
methods = ["dpmixmin", "uniform"]
sensitive_fraction = 0.25
public_fraction = 0.25
pretrain_examples = 300
pretrain_epochs = 1
finetune_epochs = 1
"""


SMALL_TEXT_PIPELINE = """epsilons = [2.0]
seeds = 1
methods = ["dpmixmin", "uniform"]
pretrain_windows = 200
pretrain_epochs = 1
finetune_steps = 2
finetune_users = 8
windows_per_user = 2
mix_steps = 20
"""


@pytest.mark.parametrize(
    ("name", "keys"), [("mnist-shift", SMALL_PIPELINE), ("shakespeare-users", SMALL_TEXT_PIPELINE)]
)
def test_the_pipeline_on_files_reproduces_the_embedded_pipeline(exported, tmp_path: Path, name: str, keys: str):
    (tmp_path / "embedded.toml").write_text(f'world = "{name}"\n' + keys)
    (tmp_path / "files.toml").write_text(f'data = "{exported[name]}"\n' + keys)
    for run in ("embedded", "files"):
        assert main(["pipeline", str(tmp_path / f"{run}.toml"), "--out", str(tmp_path / run)]) == 0
    for output in ("results.csv", "mixtures.json"):
        assert (tmp_path / "embedded" / output).read_bytes() == (tmp_path / "files" / output).read_bytes()
    with pytest.raises(InputError, match="give world or data, not both"):
        PipelineSpec(world="mnist-shift", data=str(exported["mnist-shift"]))


def test_a_fair_text_finetune_on_files_needs_their_validation_speakers(exported, tmp_path: Path, capsys):
    manifest = exported["shakespeare-users"]
    bare = tmp_path / "bare.toml"
    bare.write_text(manifest.read_text().replace('validation = "validation.jsonl"\n', ""))
    for path in (tmp_path / "sources", tmp_path / "sensitive.jsonl", tmp_path / "test.jsonl"):
        path.symlink_to(manifest.parent / path.name)
    (tmp_path / "fair.toml").write_text(
        f'data = "{bare}"\nfinetune_learning_rates = [3e-4, 3e-3]\n' + SMALL_TEXT_PIPELINE
    )
    assert main(["pipeline", str(tmp_path / "fair.toml"), "--out", str(tmp_path / "fair")]) == 2
    assert "give the manifest a validation file" in capsys.readouterr().err and not (tmp_path / "fair").exists()


# --- the formats ------------------------------------------------------------------------------------


def _png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def _images(count: int, classes: int, shape=(28, 28), seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    draws = stream(seed, "synthetic-inputs", test="data-files", count=count).numpy()
    labels = np.arange(count) % classes
    images = (draws.random((count, *shape)) * 255).astype(np.uint8)
    return images, labels


def _manifest(root: Path, body: str) -> Path:
    path = root / "data.toml"
    path.write_text(body)
    return path


def _image_world(root: Path, classes: int = 3, **overrides: dict[str, np.ndarray]) -> Path:
    """A small image world: a sensitive set and two sources, as .npz files."""
    for name, count in (("sensitive", 30), ("a", 24), ("b", 24)):
        images, labels = _images(count, classes, seed=count + len(name))
        arrays = overrides.get(name, {"images": images, "labels": labels})
        np.savez(root / f"{name}.npz", **arrays)
    return _manifest(
        root, f'kind = "image"\nclasses = {classes}\nsensitive = "sensitive.npz"\n[sources]\na = "a.npz"\nb = "b.npz"\n'
    )


def test_image_folders_and_colour_images_of_any_size_are_read(tmp_path: Path):
    for label in ("0", "1", "2"):
        (tmp_path / "folder" / label).mkdir(parents=True)
        colour, _ = _images(4, 1, shape=(32, 40, 3), seed=int(label))
        for i, picture in enumerate(colour):
            (tmp_path / "folder" / label / f"{i}.png").write_bytes(_png(picture))
    path = _image_world(tmp_path)
    path.write_text(path.read_text().replace('b = "b.npz"', 'b = "folder/"'))
    problem = registry.build(str(path), "multiclass")
    assert problem.sources == ("a", "b") and problem.n == 30 and problem.meta["name"] == "data"
    world = registry.world(str(path))
    folder = world.source_sets[1]
    assert folder.images.shape == (12, 28, 28) and folder.images.dtype == np.float32
    assert sorted(folder.labels.tolist()) == [0] * 4 + [1] * 4 + [2] * 4
    assert folder.images.min() >= 0 and folder.images.max() <= 1


def test_every_file_is_read_once(tmp_path: Path, monkeypatch):
    """Each file is hashed from the very bytes that are parsed: a file that changes while it is
    read cannot be hashed as one thing and used as another."""
    reads: list[Path] = []
    original = npz.read_file

    def counting(path: Path, what: str) -> bytes:
        reads.append(Path(path))
        return original(path, what)

    monkeypatch.setattr(npz, "read_file", counting)
    path = _image_world(tmp_path)
    world = registry.world(str(path))
    assert sorted(p.name for p in reads) == ["a.npz", "b.npz", "sensitive.npz"]
    assert world.sensitive.digest == hashlib.sha256((tmp_path / "sensitive.npz").read_bytes()).hexdigest()


# --- bad input: exit 2, one line naming the file and the fault, nothing written ---------------------

BAD_CASES = {
    "mismatched lengths": (
        "a",
        lambda: {"images": _images(24, 3)[0], "labels": np.zeros(20, int)},
        "a.npz: 24 images but 20 labels",
    ),
    "labels outside classes": (
        "a",
        lambda: {"images": _images(24, 3)[0], "labels": np.full(24, 7)},
        "labels must be 0 … 2 (the declared classes), got 7 … 7",
    ),
    "no examples": (
        "a",
        lambda: {"images": np.zeros((0, 28, 28), np.uint8), "labels": np.zeros(0, int)},
        "a.npz: no images",
    ),
    "one class": (
        "a",
        lambda: {"images": _images(24, 3)[0], "labels": np.zeros(24, int)},
        "a public source needs at least two classes, has [0]",
    ),
    "non-uint8 pixels": (
        "a",
        lambda: {"images": _images(24, 3)[0].astype(np.int16), "labels": _images(24, 3)[1]},
        "images must be uint8 (0-255) or float32 in [0, 1], got dtype int16",
    ),
    "float64 pixels": (
        "a",
        lambda: {"images": _images(24, 3)[0] / 255.0, "labels": _images(24, 3)[1]},
        "got dtype float64",
    ),
    "NaN pixels": (
        "a",
        lambda: {"images": np.full((24, 28, 28), np.nan, np.float32), "labels": _images(24, 3)[1]},
        "a.npz: images hold NaN or inf pixels",
    ),
    "users on some rows only": (
        "sensitive",
        lambda: {
            "images": _images(30, 3)[0],
            "labels": _images(30, 3)[1],
            "users": np.r_[np.arange(20), np.full(10, -1)],
        },
        "10 rows have no user (a negative id)",
    ),
    "users on a source": (
        "a",
        lambda: {"images": _images(24, 3)[0], "labels": _images(24, 3)[1], "users": np.arange(24)},
        "only the sensitive set may give users",
    ),
}


def _fails(capsys, manifest: Path, out: Path, fragment: str) -> str:
    code = main(["problem", "--data", str(manifest), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists(), err
    assert len(err.splitlines()) == 1 and fragment in err, err
    return err


@pytest.mark.parametrize("case", list(BAD_CASES), ids=list(BAD_CASES))
def test_bad_image_files_are_one_line_and_exit_2(capsys, tmp_path: Path, case: str):
    which, arrays, fragment = BAD_CASES[case]
    manifest = _image_world(tmp_path, **{which: arrays()})
    _fails(capsys, manifest, tmp_path / "p.npz", fragment)


def test_mixed_sizes_and_truncated_images_in_a_folder(capsys, tmp_path: Path):
    path = _image_world(tmp_path)
    path.write_text(path.read_text().replace('b = "b.npz"', 'b = "folder/"'))
    for label in ("0", "1"):
        (tmp_path / "folder" / label).mkdir(parents=True)
    small, large = _images(1, 1, shape=(20, 20))[0][0], _images(1, 1)[0][0]
    (tmp_path / "folder" / "0" / "a.png").write_bytes(_png(large))
    (tmp_path / "folder" / "1" / "b.png").write_bytes(_png(small))
    _fails(capsys, path, tmp_path / "p.npz", "b.png: size (20, 20), but the folder's images are (28, 28)")
    (tmp_path / "folder" / "1" / "b.png").write_bytes(_png(large)[:60])
    _fails(capsys, path, tmp_path / "p.npz", "b.png: unreadable or truncated image")


def test_images_too_large_are_refused_from_their_headers(capsys, tmp_path: Path, monkeypatch):
    """Sizes are read from the npz header and the PNG header before a pixel is decoded; Pillow's
    own bomb check is never what the user sees."""
    from dpaudit_mix.data import image_files

    side = 4097  # one pixel row past the 4096 × 4096 cap (blank: 17 MB inflated, kilobytes on disk)
    manifest = _image_world(tmp_path, a={"images": np.zeros((2, side, side), np.uint8), "labels": np.array([0, 1])})
    _fails(capsys, manifest, tmp_path / "p.npz", f"a.npz: images of {side} × {side} pixels, more than the 16,777,216")
    path = _image_world(tmp_path)
    path.write_text(path.read_text().replace('b = "b.npz"', 'b = "folder/"'))
    for label in ("0", "1"):
        (tmp_path / "folder" / label).mkdir(parents=True)
        (tmp_path / "folder" / label / "x.png").write_bytes(_png(np.zeros((28, 28), np.uint8)))
    Image.new("L", (side, side)).save(tmp_path / "folder" / "1" / "x.png")
    _fails(capsys, path, tmp_path / "p.npz", f"x.png: an image of more than 16,777,216 pixels ({side} × {side})")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Pillow's bomb warning, had it been let through, fails here
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow's bomb error at open, well below ours
        _fails(
            capsys,
            path,
            tmp_path / "p.npz",
            "x.png: an image of more than 16,777,216 pixels: every image becomes 28 × 28",
        )
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 89_478_485)
    (tmp_path / "folder" / "1" / "x.png").write_bytes(_png(np.zeros((28, 28), np.uint8)))
    for i in range(30):
        (tmp_path / "folder" / "0" / f"{i}.png").write_bytes(_png(np.zeros((28, 28), np.uint8)))
    monkeypatch.setattr(image_files, "MAX_SOURCE_VALUES", 30 * 28 * 28)  # the sensitive set's 30 fit; 32 do not
    _fails(capsys, path, tmp_path / "p.npz", "its images hold more than the 23,520 pixel values one source may hold")


def test_bad_manifests(capsys, tmp_path: Path):
    path = _image_world(tmp_path)
    out = tmp_path / "p.npz"
    path.write_text(path.read_text() + 'a = "b.npz"\n')
    _fails(capsys, path, out, "cannot parse spec")  # a duplicate source name is a duplicate TOML key
    path.write_text(path.read_text().replace('a = "b.npz"\n', 'c = "missing.npz"\n'))
    _fails(capsys, path, out, "source c names 'missing.npz', which does not exist")
    path.write_text('kind = "image"\nsensitive = "sensitive.npz"\n[sources]\nscale-0.8 = "a.npz"\n')
    _fails(capsys, path, out, "quote a name with a dot")
    path.write_text('kind = "image"\nclasses = inf\nsensitive = "sensitive.npz"\n[sources]\na = "a.npz"\n')
    _fails(capsys, path, out, "classes must be an integer from 2 to 10, got inf")
    path.write_text('kind = "video"\nsensitive = "sensitive.npz"\n[sources]\na = "a.npz"\n')
    _fails(capsys, path, out, "kind must be one of image, text, got 'video'")


def _text_world(root: Path, sensitive: str, source: bytes = b"to be or not to be\nthat is the question\n") -> Path:
    (root / "s.jsonl").write_text(sensitive)
    (root / "a.txt").write_bytes(source)
    (root / "b.txt").write_text("the quick brown fox\njumps over the lazy dog\n")
    return _manifest(root, 'kind = "text"\nsensitive = "s.jsonl"\n[sources]\na = "a.txt"\nb = "b.txt"\n')


def test_text_files_and_their_faults(capsys, tmp_path: Path):
    good = "".join(json.dumps({"text": f"speech {i} of a user", "user": f"u{i % 3}"}) + "\n" for i in range(9))
    problem = registry.build(str(_text_world(tmp_path, good)), "lm")
    assert problem.k == 2 and problem.n == 9 and sorted(set(problem.users.tolist())) == [0, 1, 2]
    out = tmp_path / "p.npz"
    some = good + json.dumps({"text": "no user here"}) + "\n"
    _fails(
        capsys,
        _text_world(tmp_path, some),
        out,
        "s.jsonl: 9 of 10 documents give a user: give every document a user, or none",
    )
    _fails(capsys, _text_world(tmp_path, good, b"caf\xe9 latin-1\n"), out, "a.txt: not UTF-8 text (byte 3")
    _fails(capsys, _text_world(tmp_path, good, b"\n   \n"), out, "a.txt: no documents (the file is empty or blank)")
    _fails(capsys, _text_world(tmp_path, good + "{not json\n"), out, "s.jsonl: line 10 is not JSON")


def test_export_refuses_an_existing_folder_and_leaves_nothing(capsys, tmp_path: Path):
    (tmp_path / "there").mkdir()
    assert main(["export-world", "mnist-shift", "--out", str(tmp_path / "there")]) == 2
    assert "exists; export-world writes a new folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["there"]


def test_a_release_names_a_data_manifest_publicly_and_check_release_rebuilds_it(tmp_path: Path):
    """The release's two ends for a manifest (the whole release is tests/test_release.py's): the
    public name (relative to the release folder, never the machine's path) and the rebuild."""
    from types import SimpleNamespace

    from dpaudit_mix import problem as problem_io
    from dpaudit_mix.base.cache import sha256_bytes
    from dpaudit_mix.release.check import _released_problem
    from dpaudit_mix.release.lambda_kind import _problem_bytes

    data = tmp_path / "data"
    data.mkdir()
    manifest = _image_world(data)
    out = tmp_path / "r"
    out.mkdir()  # the release folder, where release.json lies
    name, content = _problem_bytes(SimpleNamespace(problem=str(manifest), task="multiclass"), out)  # type: ignore[arg-type]
    assert name == "data:../data/data.toml"
    assert content == problem_io.dumps(registry.build(str(manifest), "multiclass"))
    released = {"spec": {"task": "multiclass"}}
    rebuilt, problems = _released_problem(name, released, out, None, sha256_bytes(content))
    assert problems == [] and rebuilt is not None and rebuilt.n == 30
    manifest.rename(data / "moved.toml")
    rebuilt, problems = _released_problem(name, released, out, None, sha256_bytes(content))
    assert rebuilt is None and "data manifest" in problems[0] and "not found" in problems[0]
