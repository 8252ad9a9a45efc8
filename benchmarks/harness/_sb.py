"""Every name the benchmarks take from sbdata, imported here and nowhere else under ``benchmarks/``.

sbdata's public names only (``sbdata``'s and its folders' surfaces, checked by ``tests/checks/test_layers.py``); a
renamed one is fixed on one line here.
The optional front ends (``sbdata.nodes`` needs torchdata, ``sbdata.wds`` needs WebDataset) are imported on demand,
so importing the harness never pulls an optional dependency.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from sbdata import (
    HistoryPercentile,
    LossCache,
    PruningSampler,
    ReducibleSelect,
    SBLoader,
    Schedule,
    advise,
    keep_count,
    with_index,
)
from sbdata.advice import Candidates, Measurement, Training
from sbdata.auto import Auto, CostTable, shrink_speedup, trial_order
from sbdata.cache import BUCKETS
from sbdata.scoring import Scorer, compare
from sbdata.tasks import causal_lm

__all__ = [
    "BUCKETS",
    "Auto",
    "Candidates",
    "CostTable",
    "HistoryPercentile",
    "LossCache",
    "Measurement",
    "PruningSampler",
    "ReducibleSelect",
    "SBLoader",
    "Schedule",
    "Scorer",
    "Training",
    "advise",
    "auto_decisions",
    "causal_lm",
    "compare",
    "has_auto",
    "has_nodes",
    "has_wds",
    "keep_count",
    "sb_select",
    "sb_selector",
    "shrink_speedup",
    "trial_order",
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


def has_auto(engine: Any) -> bool:
    """Whether a selection engine (``loader.engine``) runs ``keep="auto"`` (its fingerprint names auto's settings)."""
    return engine.fingerprint()["keep"] is not None


def auto_decisions(stats: Any, *, score_share: bool = False) -> dict[str, Any]:
    """What ``keep="auto"``'s controller decided over a run, from the loader's public statistics, for a run's record:
    its on-share, its trials and their share of the batches, tau, the last trial's measured speed-up (and the
    scoring share, with ``score_share``), the last decision's reason, and its decisions
    ``(step, on, keep, tau, speedup)``."""
    out = {
        "on_share": stats.auto_on_share,
        "trials": stats.auto_trials,
        "trial_share": stats.auto_trial_share,
        "tau": stats.auto_tau,
        "speedup": stats.auto_speedup,
    }
    if score_share:
        out["score_share"] = stats.auto_score_share
    return {**out, "reason": stats.auto_reason, "history": [list(d) for d in stats.auto_decisions]}
