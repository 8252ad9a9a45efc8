"""``python -m benchmarks NAME [ARGS...]`` runs ``benchmarks/<NAME>/run.py``'s ``main(ARGS)``; alone, it lists them.

Every benchmark is a folder with a ``run.py`` (its entry, ``main(argv)``), its arms and its report, and a
``README.md`` (what it asks, its exact commands, its recorded numbers); what benchmarks share is ``harness/``.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def benchmarks() -> dict[str, str]:
    """Every benchmark folder (one with a ``run.py``), by name, with the first line of its ``run.py`` docstring."""
    found = {}
    for run in sorted(ROOT.glob("*/run.py")):
        doc = ast.get_docstring(ast.parse(run.read_text())) or ""
        found[run.parent.name] = doc.splitlines()[0] if doc else ""
    return found


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a benchmark's ``main`` with the remaining arguments, or list the benchmarks."""
    args = sys.argv[1:] if argv is None else argv
    known = benchmarks()
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m benchmarks NAME [ARGS...]   (python -m benchmarks NAME --help for its options)\n")
        width = max(map(len, known))
        for name, line in known.items():
            print(f"  {name:<{width}}  {line}")
        return 0
    name, rest = args[0], args[1:]
    if name not in known:
        print(f"unknown benchmark {name!r}; one of: {', '.join(known)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"benchmarks.{name}.run")
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
