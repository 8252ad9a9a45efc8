"""The surfaces, computed as httpx's ``test_exported_members`` computes its check, not listed a second time.

- A folder's surface (``sbdata/<folder>/__init__``) is the sum of its private modules' ``__all__``: a name is
  written where it is defined and in its module's ``__all__``, nowhere else (the folder star-imports its modules).
- A surface that serves the layers above (not user API) exports only what is used outside the folder, by sbdata's
  other folders, ``examples/`` or ``benchmarks/``; what only tests use stays private (tests import private modules).
- ``sbdata.__all__`` is the reviewed list of the user's API and names exactly what ``sbdata`` defines or imports.
- A front-end module's ``__all__`` names exactly the public classes and functions it defines.
- The user-facing names (``sbdata`` and the surfaces a user imports from) stay around 50.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
import types
from pathlib import Path

import pytest

import sbdata

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = sorted(p.parent.name for p in (ROOT / "sbdata").glob("*/__init__.py") if p.parent.name != "integrations")
# user API besides sbdata itself (sbdata/__init__'s docstring)
USER_FOLDERS = ["advice", "policies", "pruning", "tasks"]
FRONT_MODULES = ["sbdata.loader", "sbdata.collate", "sbdata.nodes", "sbdata.wds", "sbdata.functional"]
INTEGRATIONS = ["sbdata.integrations.accelerate", "sbdata.integrations.lightning", "sbdata.integrations.transformers"]


def _modules_of(folder: str) -> list[types.ModuleType]:
    path = ROOT / "sbdata" / folder
    return [importlib.import_module(f"sbdata.{folder}.{info.name}") for info in pkgutil.iter_modules([str(path)])]


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_folder_surface_is_the_sum_of_its_modules(folder):
    surface = importlib.import_module(f"sbdata.{folder}")
    parts = [name for module in _modules_of(folder) for name in getattr(module, "__all__", [])]
    assert sorted(surface.__all__) == sorted(parts), "the folder's __init__ must star-import every module"
    assert len(set(parts)) == len(parts), f"a name in two modules' __all__: {parts}"
    for module in _modules_of(folder):
        assert module.__name__.rsplit(".", 1)[1].startswith("_"), f"{module.__name__}: a folder's modules are private"
        for name in getattr(module, "__all__", []):
            value = getattr(surface, name)
            defined_in = getattr(value, "__module__", module.__name__)
            if isinstance(value, (type, types.FunctionType)):
                assert defined_in == module.__name__, f"{name} is defined in {defined_in}, exported by {module}"


@functools.cache
def _trees() -> tuple[tuple[Path, ast.Module], ...]:
    files = [p for top in ("sbdata", "examples", "benchmarks") for p in sorted((ROOT / top).rglob("*.py"))]
    return tuple((path, ast.parse(path.read_text())) for path in files)


def _uses_outside(folder: str) -> set[str]:
    """Names of ``sbdata.<folder>``'s surface that code outside the folder imports or reads (tests excluded)."""
    target, used = f"sbdata.{folder}", set()
    for path, tree in _trees():
        if path.is_relative_to(ROOT / "sbdata" / folder):
            continue
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == target:
                used.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module == "sbdata":
                aliases.update(a.asname or a.name for a in node.names if a.name == folder)
            elif isinstance(node, ast.Import):
                aliases.update(a.asname or a.name for a in node.names if a.name == target)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases:
                used.add(node.attr)
    return used


@pytest.mark.parametrize("folder", sorted(set(FOLDERS) - set(USER_FOLDERS)))
def test_an_inner_surface_exports_only_what_is_used_outside_its_folder(folder):
    surface = importlib.import_module(f"sbdata.{folder}")
    unused = sorted(set(surface.__all__) - _uses_outside(folder))
    assert not unused, f"sbdata.{folder} exports {unused}, which only its own folder or tests use: make them private"


def test_the_user_api_names_what_sbdata_holds():
    public = sorted(
        name
        for name, value in vars(sbdata).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    )
    assert sbdata.__all__ == sorted(sbdata.__all__)
    assert sbdata.__all__ == public
    for name in sbdata.__all__:
        assert not getattr(sbdata, name).__module__.startswith("sbdata._front"), name


@pytest.mark.parametrize("module_name", FRONT_MODULES + INTEGRATIONS)
def test_a_front_end_module_exports_what_it_defines(module_name):
    module = importlib.import_module(module_name)
    defined = sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and isinstance(value, (type, types.FunctionType))
        and value.__module__ == module_name
    )
    reexported = [name for name in module.__all__ if name not in defined]
    assert sorted(set(module.__all__) - set(reexported)) == defined
    for name in reexported:  # a name defined elsewhere and re-exported here on purpose (e.g. trainer_schedule)
        assert getattr(module, name) is not None


def test_the_user_facing_names_stay_around_fifty():
    names = set(sbdata.__all__)
    for module in [f"sbdata.{f}" for f in USER_FOLDERS] + FRONT_MODULES + INTEGRATIONS:
        names |= set(importlib.import_module(module).__all__)
    assert len(names) <= 60, f"{len(names)} user-facing names: {sorted(names)}"


def test_the_checks_catch_an_unused_export(monkeypatch):
    surface = importlib.import_module("sbdata.cache")
    monkeypatch.setattr(surface, "__all__", [*surface.__all__, "NOT_USED_ANYWHERE"])
    with pytest.raises(AssertionError, match="NOT_USED_ANYWHERE"):
        test_an_inner_surface_exports_only_what_is_used_outside_its_folder("cache")
