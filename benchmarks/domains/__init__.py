"""The domains: each module here holds one :class:`~benchmarks.lab.domain.Domain` as ``DOMAIN``, and a suite names its
domain by the module's name. Adding a dataset is a module here and a suite's entry (``benchmarks/README.md``, "Adding a
domain")."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from benchmarks.lab.domain import Domain


def names() -> list[str]:
    """Every domain's name (its module's)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if not m.name.startswith("_"))


def domain(name: str) -> Domain:
    """The domain named ``name``, its module imported on demand (a domain's optional packages load with it)."""
    if name not in names():
        raise ValueError(f"unknown domain {name!r}: one of {names()}")
    return importlib.import_module(f"benchmarks.domains.{name}").DOMAIN
