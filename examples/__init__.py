"""Runnable examples, each a script: ``python examples/quickstart.py`` (see its docstring for the others).

The scripts import their shared data and models (``common.py``) as a sibling module; the benchmarks and the tests,
run from the repository root, import the same code as ``examples.common``.
"""
