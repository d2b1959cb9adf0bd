"""The package's layering, read from every module's imports (ast, function-level imports included).

Layers, bottom up: base utilities → the core (problem, MixMin, learner, randomness, accounting,
the audit statistics) → models → data → engines (audit, recovery, release, verification, testing) → experiments
(pipeline, text and WarmSyn tracks) → the front (CLI, demo, experiments dispatch). A module may
import its own layer or below; and no two subpackages may import each other, even through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "dpaudit_mix"

#: module (or subpackage) → layer; a subpackage's modules inherit its layer unless named here.
LAYERS: dict[str, int] = {
    **dict.fromkeys(
        [
            "errors",
            "npz",
            "owned",
            "atomic",
            "cache",
            "resources",
            "specfile",
            "stats",
            "reporting",
            "alphabet",
            "randomness",
            "backend",
            "threads",
            "registry",
            "calibrations",
            "identity",
        ],
        0,
    ),
    **dict.fromkeys(
        [
            "problem",
            "optimum",
            "learner",
            "tuning",
            "accounting",
            "audit.bounds",
            "audit.attack",
            "audit.profile",
            "audit.diagnostics",
            "audit.canaries",
            "audit.chunks",
            "audit.scores",
            "audit.one_run",
            "audit.dirac",
            "audit.result",
        ],
        1,
    ),
    "models": 2,
    "data": 3,
    **dict.fromkeys(["audit", "recovery", "release", "verification", "testing", "mix", "canaries", "finished"], 4),
    **dict.fromkeys(["pipeline", "lm", "synth"], 5),
    **dict.fromkeys(["experiments", "cli", "demo", "__init__", "__main__"], 6),
}
CORE = 1


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = PACKAGE) -> set[str]:
    """The package modules ``path`` imports (relative imports resolved), at any depth of the file."""
    name = module_name(path, root)
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith(root.name + "."):
                target = node.module[len(root.name) + 1 :]
            else:
                continue
            for alias in node.names:  # `from . import model` names a module
                candidate = f"{target}.{alias.name}" if target else alias.name
                found.add(candidate if _exists(candidate, root) else target)
        elif isinstance(node, ast.Import):
            found |= {a.name[len(root.name) + 1 :] for a in node.names if a.name.startswith(root.name + ".")}
    return {m for m in found if m}


def _exists(module: str, root: Path) -> bool:
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def layer(module: str) -> int:
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        if ".".join(parts[:cut]) in LAYERS:
            return LAYERS[".".join(parts[:cut])]
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


def package_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of two or more subpackages (top-level modules count as their own)."""
    top: dict[str, set[str]] = {}
    for m, targets in edges.items():
        top.setdefault(m.split(".")[0], set()).update(t.split(".")[0] for t in targets)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in top.get(v, ()):
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

    for v in sorted(top):
        if v not in index:
            visit(v)
    return groups


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower() -> None:
    edges = graph()
    assert len(edges) > 50 and any(edges.values())  # the walk found the package and its imports
    assert upward_imports(edges) == []


def test_no_cycle_between_subpackages() -> None:
    assert package_cycles(graph()) == []


def test_the_core_imports_nothing_above_it() -> None:
    edges = graph()
    core = [m for m in edges if layer(m) <= CORE]
    assert {"problem", "optimum", "learner", "accounting", "randomness", "audit.bounds"} <= set(core)
    assert [f"{m} → {t}" for m in core for t in edges[m] if layer(t) > CORE] == []


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
    root = tmp_path / "dpaudit_mix"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert package_cycles(graph(root)) == expected


def test_the_layer_check_sees_an_upward_import_from_the_core(tmp_path: Path) -> None:
    root = tmp_path / "dpaudit_mix"
    (root / "pipeline").mkdir(parents=True)
    (root / "pipeline" / "__init__.py").write_text("")
    (root / "pipeline" / "stages.py").write_text("x = 1\n")
    (root / "learner.py").write_text("import numpy\nfrom dpaudit_mix.pipeline.stages import x\n")
    assert upward_imports(graph(root)) == ["learner (layer 1) imports pipeline.stages (layer 5)"]
