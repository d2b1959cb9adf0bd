"""The house rules, read from the code: small modules and functions, keyword-only trailing
arguments, one home and one shape for the extension API, type hints shipped."""

from __future__ import annotations

import ast
import inspect
import tomllib
from pathlib import Path

import pytest

import dpaudit_mix as dm

PACKAGE = Path(dm.__file__).parent
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80
#: the most positional parameters a function takes; the rest are keyword-only, so that values of
#: one type (ε, δ, a confidence) never sit side by side unnamed.
MAX_POSITIONAL = 6
#: called only with a checked calibration request unpacked (``calibrate_afresh(*key)``).
UNPACKED = {"calibrate_afresh"}


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(PACKAGE.rglob("*.py"))]


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_module_over_450_lines_and_no_function_over_80() -> None:
    modules = _modules()
    assert len(modules) > 100
    long_modules = [
        f"{p.relative_to(PACKAGE)}: {n}"
        for p, _ in modules
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    long_functions = [
        f"{p.relative_to(PACKAGE)}:{f.lineno} {f.name}: {f.end_lineno - f.lineno + 1} lines"
        for p, tree in modules
        for f in _functions(tree)
        if f.end_lineno is not None and f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long_modules == [] and long_functions == []


def test_trailing_parameters_are_keyword_only() -> None:
    crowded = []
    for p, tree in _modules():
        for f in _functions(tree):
            positional = [a.arg for a in f.args.posonlyargs + f.args.args if a.arg not in ("self", "cls")]
            if len(positional) > MAX_POSITIONAL and f.name not in UNPACKED:
                crowded.append(f"{p.relative_to(PACKAGE)}:{f.lineno} {f.name}({', '.join(positional)})")
    assert crowded == []


@pytest.mark.parametrize(
    "name, value",
    [
        ("audit_score_file", "epsilon"),
        ("dp_finetune", "epsilon"),
        ("analyse", "epsilon"),
        ("calibrate", "rel_tol"),
        ("fit", "canary"),
    ],
)
def test_the_crowded_signatures_name_their_values(name: str, value: str) -> None:
    from dpaudit_mix import accounting, learner
    from dpaudit_mix.audit.many_run import score_file, scores
    from dpaudit_mix.models import cnn

    homes = {"audit_score_file": score_file, "dp_finetune": cnn, "analyse": scores, "calibrate": accounting}
    function = getattr(homes.get(name, learner), name)
    assert inspect.signature(function).parameters[value].kind is inspect.Parameter.KEYWORD_ONLY


def test_every_register_function_is_exported_from_the_top_package_in_one_shape() -> None:
    defined = {
        f.name
        for _, tree in _modules()
        for f in tree.body
        if isinstance(f, ast.FunctionDef) and f.name.startswith("register_")
    }
    assert defined <= set(dm.__all__), defined - set(dm.__all__)
    names_only = {"register_purpose", "register_data"}  # they register a name (a stream purpose, a manifest's path)
    for name in sorted(defined - names_only):
        parameters = list(inspect.signature(getattr(dm, name)).parameters.values())
        shape = [(p.name if i == 0 else "obj", p.kind) for i, p in enumerate(parameters)]
        assert shape == [
            ("name", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            ("obj", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            ("obj", inspect.Parameter.KEYWORD_ONLY),
        ], name
        assert parameters[2].name == "replace" and parameters[2].default is False, name
    for name in sorted(names_only):
        assert list(inspect.signature(getattr(dm, name)).parameters) in (["purpose"], ["path"]), name


def test_the_type_hints_ship_with_the_package() -> None:
    assert (PACKAGE / "py.typed").is_file()
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["dpaudit_mix"]


def test_no_public_class_name_is_defined_twice() -> None:
    """One name, one thing: a reader who meets a class name knows which class it is."""
    homes: dict[str, list[str]] = {}
    for path, tree in _modules():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                homes.setdefault(node.name, []).append(str(path.relative_to(PACKAGE)))
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}


def test_the_root_and_the_audit_floor_stay_small() -> None:
    """A newcomer sees problem → optimum → learner at the root (at most 12 modules), and the
    audit's shared floor (at most 15) under its two wings."""
    assert len(list(PACKAGE.glob("*.py"))) <= 12
    assert len(list((PACKAGE / "audit").glob("*.py"))) <= 15
    assert {p.name for p in (PACKAGE / "audit").iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "mechanisms",
        "many_run",
        "one_run",
    }


def test_a_moved_module_is_importable_by_its_old_name_as_itself() -> None:
    """Every module the layout moved answers to its old name: the same object, so an import, an
    attribute and a monkeypatch reach the same code."""
    import importlib

    import dpaudit_mix

    for old, new in dpaudit_mix._MOVED.items():
        before = importlib.import_module(f"dpaudit_mix.{old}")
        assert before is importlib.import_module(f"dpaudit_mix.{new}"), old
        assert before.__name__ == before.__spec__.name == f"dpaudit_mix.{new}"
    from dpaudit_mix.audit.scores import audit_scores  # an old path, through the alias

    from dpaudit_mix.audit.one_run import audit_one_run

    assert audit_scores is dpaudit_mix.audit_scores and audit_one_run is dpaudit_mix.audit_one_run


def _public_names() -> list[tuple[str, object]]:
    import importlib

    found = []
    for module_name in ("dpaudit_mix", "dpaudit_mix.canaries", "dpaudit_mix.testing"):
        module = importlib.import_module(module_name)
        found += [(f"{module_name}.{name}", getattr(module, name)) for name in module.__all__]
    return found


def test_every_public_name_says_its_arguments_returns_and_raises() -> None:
    """The API reference renders google-style sections as tables: each public function names every
    parameter under ``Args:`` and has ``Returns:`` (unless it returns None) and ``Raises:``; each
    public class has ``Attributes:`` (or ``Args:``)."""
    import inspect

    missing = []
    for name, obj in _public_names():
        doc = inspect.getdoc(obj) or ""
        if inspect.isclass(obj):
            if "Attributes:" not in doc and "Args:" not in doc:
                missing.append(f"{name}: no Attributes:")
        elif inspect.isfunction(obj):
            signature = inspect.signature(obj)
            args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
            missing += [
                f"{name}: {p} not under Args:"
                for p in signature.parameters
                if f"\n{p}:" not in f"\n{args}".replace("\n  ", "\n")
            ]
            if signature.return_annotation not in (None, "None") and "Returns:" not in doc:
                missing.append(f"{name}: no Returns:")
            if "Raises:" not in doc:
                missing.append(f"{name}: no Raises:")
    assert missing == []
