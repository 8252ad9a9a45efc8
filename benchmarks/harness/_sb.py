"""Every name the benchmarks take from sbdata, imported here and nowhere else under ``benchmarks/``.

sbdata's modules move (``sbdata/gain.py`` is moving into ``sbdata/auto/``): a moved name is fixed on one line here.
The optional front ends (``sbdata.nodes`` needs torchdata, ``sbdata.wds`` needs WebDataset) are imported on demand,
so importing the harness never pulls an optional dependency.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from sbdata import (
    LossCache,
    LossHistory,
    PruningSampler,
    ReducibleLoss,
    SBLoader,
    Schedule,
    keep_count,
    with_index,
)
from sbdata.adapters import causal_lm
from sbdata.auto import Auto
from sbdata.cache import BUCKETS
from sbdata.gain import CostTable

__all__ = [
    "BUCKETS",
    "Auto",
    "CostTable",
    "LossCache",
    "LossHistory",
    "PruningSampler",
    "ReducibleLoss",
    "SBLoader",
    "Schedule",
    "causal_lm",
    "has_nodes",
    "has_wds",
    "keep_count",
    "sb_select",
    "sb_selector",
    "with_index",
]


def has_nodes() -> bool:
    """Whether sbdata's torchdata node (``sbdata.nodes``, with torchdata installed) can be imported."""
    return importlib.util.find_spec("sbdata.nodes") is not None and importlib.util.find_spec("torchdata") is not None


def has_wds() -> bool:
    """Whether sbdata's WebDataset stage (``sbdata.wds``, with webdataset installed) can be imported."""
    return importlib.util.find_spec("sbdata.wds") is not None and importlib.util.find_spec("webdataset") is not None


def sb_selector() -> Any:
    """``sbdata.nodes.SBSelector``, imported on demand (torchdata is optional)."""
    from sbdata.nodes import SBSelector

    return SBSelector


def sb_select() -> Any:
    """``sbdata.wds.sb_select``, imported on demand (webdataset is optional)."""
    from sbdata.wds import sb_select as select

    return select
