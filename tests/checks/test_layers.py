"""The tree is the map: sbdata's folders are layers that import one way, and cross a folder only through its surface.

Every import of a sbdata module is read (also inside functions and ``if TYPE_CHECKING:``). A module may import its own
folder's modules and the surface (``__init__``) of a folder in a lower layer, never a higher or equal one, and never
another folder's private module or name. ``benchmarks/`` and ``examples/`` use folder surfaces and ``sbdata`` alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The layers, bottom first (docs/design.md draws them). A unit is a folder of sbdata or a top-level module.
LAYERS: list[set[str]] = [
    {"_util"},
    {"batch", "tasks"},
    {"policies"},
    {"scoring", "cache", "distributed", "auto"},
    {"engine"},
    {"_front", "pruning", "advice"},
    {"loader", "collate", "nodes", "wds", "functional"},
    {"integrations"},
    {"__init__"},
]
RANK = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    """``sbdata.engine._engine`` -> ``engine``; ``sbdata.loader`` -> ``loader``; ``sbdata`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, module: str, is_package: bool, top: str) -> list[tuple[int, str, list[str]]]:
    """``(line, imported module, names)`` for every import of a ``top`` module in ``source``, wherever it stands (in a
    function, under ``if TYPE_CHECKING:``), relative ones resolved against ``module``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == top]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                target = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            if target.split(".")[0] == top:
                found.append((node.lineno, target, [a.name for a in node.names]))
    return found


def sbdata_imports(source: str, module: str, is_package: bool = False) -> list[tuple[int, str, list[str]]]:
    """``(line, imported module, names)`` for every import of a sbdata module in ``source`` (relative ones resolved
    against ``module``; ``names`` empty for ``import x``)."""
    return imports(source, module, is_package, "sbdata")


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """What ``module`` (a sbdata module, or one outside sbdata) imports against the layering and surface rules."""
    inside = module.split(".")[0] == "sbdata"
    mine = unit_of(module) if inside else None
    found = []
    for line, target, names in sbdata_imports(source, module, is_package):
        unit = unit_of(target)
        if inside and unit == mine:
            continue  # a folder's own modules
        private_path = [part for part in target.split(".")[2:] if part.startswith("_")]
        private_names = [name for name in names if name.startswith("_") and f"{target}.{name}" != "sbdata._front"]
        if private_path or private_names or (not inside and unit != "__init__" and unit.startswith("_")):
            found.append(f"{line}: {target} {names} reaches past the surface of sbdata.{unit}")
        if inside and unit != "__init__" and RANK[unit] >= RANK[mine]:
            found.append(f"{line}: {mine} (layer {RANK[mine]}) imports {unit} (layer {RANK[unit]})")
        if inside and unit == "__init__" and mine != "__init__":
            found.append(f"{line}: {mine} imports the top-level package, which imports every layer")
    return found


def sbdata_modules() -> list[Path]:
    return sorted((ROOT / "sbdata").rglob("*.py"))


def test_every_unit_has_a_layer():
    units = {unit_of(module_name(path)) for path in sbdata_modules()}
    assert units == set(RANK), (units - set(RANK), set(RANK) - units)


def test_layers_point_one_way_and_folders_meet_at_their_surfaces():
    offenders = []
    for path in sbdata_modules():
        name = module_name(path)
        for problem in violations(path.read_text(), name, path.name == "__init__.py"):
            offenders.append(f"{path.relative_to(ROOT)}:{problem}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("folder", ["benchmarks", "examples"])
def test_benchmarks_and_examples_use_public_surfaces_only(folder):
    offenders = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for problem in violations(path.read_text(), module_name(path)):
            offenders.append(f"{path.relative_to(ROOT)}:{problem}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("top", ["sbdata", "benchmarks"])
def test_no_import_circle_between_modules(top):
    """Within each folder too: the module graph (package surfaces as nodes) has no cycle; every import counts, also
    one inside a function or under ``if TYPE_CHECKING:``."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / top).rglob("*.py")):
        name = module_name(path)
        edges = set()
        for _, target, names in imports(path.read_text(), name, path.name == "__init__.py", top):
            for candidate in [f"{target}.{n}" for n in names] + [target]:
                if (ROOT / (candidate.replace(".", "/") + ".py")).exists() or (
                    ROOT / candidate.replace(".", "/") / "__init__.py"
                ).exists():
                    edges.add(candidate)
                    break
        graph[name] = edges - {name}
    # A package's __init__ re-exports its modules: the package -> module edges are expected; a module -> its own
    # package edge would close a circle through it.
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        seen[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if seen.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join([*stack[stack.index(nxt) :], nxt]))
            if nxt not in seen:
                visit(nxt)
        stack.pop()
        seen[node] = 2

    for node in sorted(graph):
        if node not in seen:
            visit(node)


def test_benchmarks_import_nothing_from_examples():
    """Examples are for users to read: the benchmarks' models, data and cost model live in their harness."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "benchmarks").rglob("*.py"))
        for line, _, _ in imports(path.read_text(), module_name(path), path.name == "__init__.py", "examples")
    ]
    assert not offenders, offenders


def test_the_circle_check_sees_type_only_and_function_imports():
    source = "if TYPE_CHECKING:\n    from .arms import Arm\ndef f():\n    from . import cost\n"
    found = imports(source, "benchmarks.harness.train", False, "benchmarks")
    found_lines = [(line, target) for line, target, _ in found]
    assert found_lines == [(2, "benchmarks.harness.arms"), (4, "benchmarks.harness")]


def test_the_scanner_finds_each_violation():
    source = """
from sbdata.engine._engine import SelectionEngine
from sbdata.batch import _structure
import sbdata.cache._layouts
from sbdata.engine import SelectionEngine
from sbdata.policies import TopK
from sbdata import SBLoader
from sbdata._front import EngineFront
from sbdata.cache._cache import LossCache
from sbdata.policies._base import keep_count
"""
    found = violations(source, "sbdata.cache._cache")
    lines = {line.split(":")[0] for line in found}
    assert lines == {"2", "3", "5", "7", "8", "10"}  # 4 and 9 (its own folder) and 6 (a lower surface) pass
    assert "2: sbdata.engine._engine ['SelectionEngine'] reaches past the surface of sbdata.engine" in found
    assert (
        "2: cache (layer 3) imports engine (layer 4)" in found
        and "5: cache (layer 3) imports engine (layer 4)" in found
    )
    assert "3: sbdata.batch ['_structure'] reaches past the surface of sbdata.batch" in found
    assert "7: cache imports the top-level package, which imports every layer" in found
    assert "8: cache (layer 3) imports _front (layer 5)" in found
    assert "10: sbdata.policies._base ['keep_count'] reaches past the surface of sbdata.policies" in found
    outside = violations("from sbdata._front import EngineFront\nfrom sbdata.batch import select\n", "examples.x")
    assert outside == ["1: sbdata._front ['EngineFront'] reaches past the surface of sbdata._front"]


def test_the_design_map_lists_every_module():
    text = (ROOT / "docs" / "design.md").read_text()
    table = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    listed = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `sbdata/")}
    modules = {p.relative_to(ROOT).as_posix() for p in sbdata_modules() if p.name != "__init__.py"}
    assert listed == modules | {"sbdata/__init__.py"}, (modules - listed, listed - modules)
    for line in text.split("```text", 1)[1].split("```", 1)[0].splitlines():  # the tree at the top: one line each
        name = line.strip().split(" ")[0].rstrip("/")
        if line.startswith("  ") and name and not line.startswith("   "):
            assert (ROOT / "sbdata" / name).exists(), name
    folders = {p.parent.name for p in (ROOT / "sbdata").glob("*/__init__.py")}
    assert all(f"  {folder}/" in text.split("```", 2)[1] for folder in folders), folders
