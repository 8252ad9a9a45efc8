"""Every name the benchmarks take from sbdata, imported here and nowhere else under ``benchmarks/``.

sbdata's public names only (``sbdata``'s and its folders' surfaces, checked by ``tests/checks/test_layers.py``); a
renamed one is fixed on one line here. The optional front ends (``sbdata.nodes`` needs torchdata, ``sbdata.wds``
needs WebDataset) are imported on demand, so importing the lab never pulls an optional dependency.
"""

from __future__ import annotations

from typing import Any

from sbdata import Auto, CostTable, LossCache, PruningSampler, ReducibleSelect, SBLoader, advise
from sbdata.advice import Candidates, Measurement, Training
from sbdata.scoring import Scorer
from sbdata.tasks import causal_lm

__all__ = [
    "Auto",
    "Candidates",
    "CostTable",
    "LossCache",
    "Measurement",
    "PruningSampler",
    "ReducibleSelect",
    "SBLoader",
    "Scorer",
    "Training",
    "advise",
    "auto_decisions",
    "causal_lm",
    "sb_select",
    "sb_selector",
]


def sb_selector() -> Any:
    """``sbdata.nodes.SBSelector``, imported on demand (torchdata is optional)."""
    from sbdata.nodes import SBSelector

    return SBSelector


def sb_select() -> Any:
    """``sbdata.wds.sb_select``, imported on demand (webdataset is optional)."""
    from sbdata.wds import sb_select as select

    return select


def auto_decisions(stats: Any) -> dict[str, Any]:
    """What ``keep="auto"``'s controller decided over a run, from the loader's public statistics, for a run's record:
    its on-share, its trials and their share of the batches, the last trial's measured speed-up, the last decision's
    reason, and its decisions ``(step, on, keep, tau, speedup)``."""
    return {
        "on_share": stats.auto_on_share,
        "trials": stats.auto_trials,
        "trial_share": stats.auto_trial_share,
        "speedup": stats.auto_speedup,
        "reason": stats.auto_reason,
        "history": [list(d) for d in stats.auto_decisions],
    }
