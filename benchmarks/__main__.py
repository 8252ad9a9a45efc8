"""``python -m benchmarks RECIPE [ARGS...]`` runs a recipe's ``main(ARGS)``; alone, it lists the recipes.

A recipe asks one question of any domain's suite (``benchmarks/recipes/``); ``python -m benchmarks RECIPE --help``
gives its suites, stages and options. The lab and how to add a domain: ``benchmarks/README.md``.
"""

from __future__ import annotations

import importlib
import sys

RECIPES = {
    "frontier": "selection against the budget-matched tuned frontier (grid, timing, price table, report)",
    "auto": "keep='auto' where selection hurts and where it pays, told the run's length and not",
    "advise": "advise's prediction and branch trial against the measured whole runs",
    "micro": "what sbdata costs beside its scoring pass: overhead, scoring agreement, the loss cache, streaming, GPU",
}


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a recipe's ``main`` with the remaining arguments, or list the recipes."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(
            "usage: python -m benchmarks RECIPE [SUITE] [--stage STAGE] [--smoke]   (RECIPE --help for its options)\n"
        )
        for name, line in RECIPES.items():
            print(f"  {name:<9} {line}")
        return 0
    if args[0] not in RECIPES:
        print(f"unknown recipe {args[0]!r}; one of: {', '.join(RECIPES)}", file=sys.stderr)
        return 2
    return importlib.import_module(f"benchmarks.recipes.{args[0]}").main(args[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
