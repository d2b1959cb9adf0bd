"""The package's layering, read from every module's imports: top-level, inside a function, under
``TYPE_CHECKING``, through ``importlib.import_module``, and the package ``__init__`` that an
import of a submodule runs first.

The layers are written once, in :data:`LAYERS`; ``docs/design.md`` shows them as the picture
:func:`picture` draws (a test keeps the two equal). A module may import its own layer or below;
no two modules may import each other, even through others; no two subpackages either.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "dpaudit_mix"
DESIGN = Path(__file__).parent.parent / "docs" / "design.md"

#: the layers, bottom up: (name, what lives there, its modules and subpackages). A subpackage's
#: modules inherit its layer unless named here.
LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("base", "utilities every layer uses", ("base",)),
    (
        "core",
        "the mixing problem, λ★, the learner, the accountant, the audit statistics (mypy strict)",
        (
            "accounting",
            "audit.accounted",
            "audit.attack",
            "audit.bounds",
            "audit.mixmin_canaries",
            "audit.many_run.chunks",
            "audit.claim",
            "audit.many_run.diagnostics",
            "audit.dirac",
            "audit.one_run",
            "audit.many_run",
            "audit.plan",
            "audit.profile",
            "audit.power",
            "audit.many_run.result",
            "audit.many_run.scores",
            "audit.many_run.sorted_scores",
            "audit.many_run.ties",
            "audit.many_run.words",
            "learner",
            "optimum",
            "problem",
            "tuning",
        ),
    ),
    ("models", "the networks and their (DP) training; no worlds, no specs", ("models",)),
    ("data", "worlds, proxies, problems, data manifests", ("data",)),
    (
        "engines",
        "audit, recovery, release, verification, the user-facing checks and mixes",
        (
            "audit",
            "audit.many_run.engine",
            "audit.many_run.report",
            "audit.many_run.score_file",
            "canaries",
            "finished",
            "mix",
            "recovery",
            "release",
            "testing",
            "verification",
        ),
    ),
    ("tracks", "the pipeline's image and text tracks and WarmSyn", ("lm", "pipeline", "synth")),
    (
        "front",
        "the command line, the demo, the spec-file dispatch, the top package",
        (
            "__init__",
            "__main__",
            "cli",
            "demo",
            "experiments",
        ),
    ),
)
LAYER = {module: index for index, (_, _, modules) in enumerate(LAYERS) for module in modules}
CORE = 1
TOP = "__init__"  # the top package's own module name here


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _exists(module: str, root: Path) -> bool:
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _under(package: str, root: Path) -> set[str]:
    """Every module of ``package`` ("" = the whole package) and below."""
    folder = root.joinpath(*package.split(".")) if package else root
    return {module_name(p, root) for p in folder.rglob("*.py")} - {package or TOP}


class Unfollowed(Exception):
    """An ``import_module``/``__import__`` whose target the check cannot name."""


def _dynamic(node: ast.Call, own_package: str, name: str, root: Path) -> set[str]:
    """What ``import_module(...)`` or ``__import__(...)`` may load: a literal, exactly; a target
    anchored at ``__package__`` or ``f"{__name__}."``, anything in that package."""
    first = node.args[0] if node.args else None
    anchored = len(node.args) > 1 and isinstance(node.args[1], ast.Name) and node.args[1].id == "__package__"
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        text = first.value
        if text.startswith("."):
            if not anchored:
                raise Unfollowed(f"{name}: relative import_module({text!r}) without __package__")
            dots = len(text) - len(text.lstrip("."))
            base = own_package.split(".")[: len(own_package.split(".")) - dots + 1] if own_package else []
            return {".".join([*base, text.lstrip(".")]).strip(".")}
        if text.startswith(root.name + "."):
            return {text[len(root.name) + 1 :]}
        return set()  # another distribution's module
    if anchored:
        return _under(own_package, root)
    if (
        isinstance(first, ast.JoinedStr)
        and len(first.values) >= 2
        and isinstance(first.values[0], ast.FormattedValue)
        and isinstance(first.values[0].value, ast.Name)
        and first.values[0].value.id == "__name__"
        and isinstance(first.values[1], ast.Constant)
        and str(first.values[1].value).startswith(".")
    ):
        return _under(name if name != TOP else "", root)
    raise Unfollowed(f"{name}: an import_module/__import__ of {ast.unparse(node)} that names no package")


def imports(path: Path, root: Path = PACKAGE) -> set[str]:
    """The package modules ``path`` imports (relative imports resolved), at any depth of the file,
    with the ancestors of each that an import runs first (its own ancestors are running already)."""
    name = module_name(path, root)
    own_package = name if path.name == "__init__.py" else ".".join(name.split(".")[:-1])
    if name == TOP:
        own_package = ""
    package = own_package.split(".") if own_package else []
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module == root.name or (node.module or "").startswith(root.name + "."):
                target = (node.module or "")[len(root.name) + 1 :]
            else:
                continue
            for alias in node.names:  # `from . import model` names a module; `from .. import x` the package
                candidate = f"{target}.{alias.name}" if target else alias.name
                found.add(candidate if _exists(candidate, root) else (target or TOP))
        elif isinstance(node, ast.Import):
            found |= {a.name[len(root.name) + 1 :] for a in node.names if a.name.startswith(root.name + ".")}
        elif isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in ("import_module", "__import__"):
                found |= _dynamic(node, own_package, name, root)
    ancestors = {".".join(name.split(".")[:cut]) for cut in range(1, name.count(".") + 1)}
    for target in list(found):
        parts = target.split(".")
        found |= {".".join(parts[:cut]) for cut in range(1, len(parts))} - ancestors - {own_package}
    return {m for m in found if m and m != name}


def layer(module: str) -> int:
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        if ".".join(parts[:cut]) in LAYER:
            return LAYER[".".join(parts[:cut])]
    raise KeyError(f"{module} has no layer: add it to LAYERS")


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    return {module_name(p, root): imports(p, root) for p in sorted(root.rglob("*.py"))}


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    return [
        f"{m} (layer {layer(m)}) imports {t} (layer {layer(t)})"
        for m, targets in edges.items()
        for t in sorted(targets)
        if layer(t) > layer(m)
    ]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more nodes (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w == v:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(groups)


def package_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Cycles between subpackages (top-level modules count as their own)."""
    top: dict[str, set[str]] = {}
    for m, targets in edges.items():
        top.setdefault(m.split(".")[0], set()).update(t.split(".")[0] for t in targets)
    return cycles(top)


def picture() -> str:
    """The layers as ``docs/design.md`` shows them: top first, each with what may import it."""
    lines = []
    for index in range(len(LAYERS) - 1, -1, -1):
        name, what, modules = LAYERS[index]
        lines.append(f"{index}  {name:<8} {what}")
        lines += textwrap.wrap(", ".join(modules), 100, initial_indent=" " * 12, subsequent_indent=" " * 12)
        if index:
            lines.append(" " * 12 + "↓ imports only from below (and its own layer)")
    return "\n".join(lines)


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower() -> None:
    edges = graph()
    assert len(edges) > 50 and any(edges.values())  # the walk found the package and its imports
    assert upward_imports(edges) == []


def test_no_import_cycle_between_modules() -> None:
    assert cycles(graph()) == []


def test_no_cycle_between_subpackages() -> None:
    assert package_cycles(graph()) == []


def test_the_core_imports_nothing_above_it() -> None:
    edges = graph()
    core = [m for m in edges if layer(m) <= CORE]
    assert {"problem", "optimum", "learner", "accounting", "base.randomness", "audit.bounds"} <= set(core)
    assert [f"{m} → {t}" for m in core for t in edges[m] if layer(t) > CORE] == []


def test_the_design_shows_the_layers_of_this_table() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    drawn = re.search(r"<!-- layers: drawn from tests/test_layers.py -->\n```text\n(.*?)\n```", text, re.S)
    assert drawn is not None, "docs/design.md has no layers picture"
    assert drawn.group(1) == picture()


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "dpaudit_mix"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    "files, expected",
    [
        # pipeline → lm → pipeline: a cycle between subpackages, though no module imports itself
        (
            {
                "pipeline/__init__.py": "",
                "pipeline/run.py": "from ..lm import run\n",
                "lm/__init__.py": "",
                "lm/run.py": "def f():\n    from ..pipeline.stages import x\n",
                "pipeline/stages.py": "x = 1\n",
            },
            [["lm", "pipeline"]],
        ),
        (
            {
                "pipeline/__init__.py": "",
                "pipeline/run.py": "from ..models import cnn\n",
                "models/__init__.py": "",
                "models/cnn.py": "x = 1\n",
            },
            [],
        ),
    ],
)
def test_the_cycle_check_sees_a_cycle_through_a_lazy_import(
    tmp_path: Path, files: dict[str, str], expected: list[list[str]]
) -> None:
    assert package_cycles(graph(_package(tmp_path, files))) == expected


@pytest.mark.parametrize(
    "files, expected",
    [
        # two modules of one subpackage, one of them lazily
        (
            {"data/__init__.py": "", "data/a.py": "from .b import x\n", "data/b.py": "def f():\n    from . import a\n"},
            [["data.a", "data.b"]],
        ),
        # spec → catalog inside mechanisms runs mechanisms/__init__, which imports spec
        (
            {
                "audit/__init__.py": "",
                "audit/spec.py": "from .mechanisms.catalog import names\n",
                "audit/mechanisms/__init__.py": "from ..spec import AuditSpec\n",
                "audit/mechanisms/catalog.py": "names = ()\n",
            },
            [["audit.mechanisms", "audit.spec"]],
        ),
        # a module that takes a name from the top package, which loads every module by name
        (
            {
                "__init__.py": "import importlib\ndef f(n):\n    return importlib.import_module(f'{__name__}.{n}')\n",
                "gate.py": "from . import __version__\n",
            },
            [["__init__", "gate"]],
        ),
        # importlib, relative to the package, as a literal
        (
            {
                "models/__init__.py": "",
                "models/a.py": "from importlib import import_module\nm = import_module('.b', __package__)\n",
                "models/b.py": "from .a import x\n",
            },
            [["models.a", "models.b"]],
        ),
    ],
)
def test_the_module_cycle_check_sees_lazy_implicit_and_importlib_imports(
    tmp_path: Path, files: dict[str, str], expected: list[list[str]]
) -> None:
    assert cycles(graph(_package(tmp_path, files))) == expected


def test_the_layer_check_sees_an_upward_import_from_the_core(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "pipeline/__init__.py": "",
            "pipeline/stages.py": "x = 1\n",
            "learner.py": "import numpy\nfrom dpaudit_mix.pipeline.stages import x\n",
        },
    )
    assert upward_imports(graph(root)) == [
        "learner (layer 1) imports pipeline (layer 5)",
        "learner (layer 1) imports pipeline.stages (layer 5)",
    ]


def test_the_layer_check_sees_an_upward_importlib_import(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "pipeline/__init__.py": "",
            "pipeline/stages.py": "x = 1\n",
            "problem.py": "import importlib\ndef f():\n    return importlib.import_module(\n"
            "        'dpaudit_mix.pipeline.stages')\n",
        },
    )
    assert "problem (layer 1) imports pipeline.stages (layer 5)" in upward_imports(graph(root))


def test_an_import_the_check_cannot_follow_fails_it(tmp_path: Path) -> None:
    dynamic = "import importlib\ndef f(n):\n    return importlib.import_module(n)\n"
    root = _package(tmp_path, {"problem.py": dynamic})
    with pytest.raises(Unfollowed, match="names no package"):
        graph(root)
