"""The selection engine: the one place where loader batches are scored, selected, pooled and emitted; its typed
options, the schedule, the statistics, and (internal) its parts: passes, intake, the SB step, the emitter and pool,
the non-finite check, and ``keep="auto"``'s controller and cost meter. See ``docs/design.md``.
"""

from sbdata.engine._engine import SelectionEngine
from sbdata.engine._options import (
    EngineOptions,
    ForwardFn,
    IdKey,
    KeepArg,
    LossFn,
    NanPolicy,
    PolicyArg,
    PolicyName,
    ReduceFn,
    ScoreMode,
    ScoreName,
    SplitFn,
    SyncMode,
)
from sbdata.engine._schedule import Schedule, should_selective_backprop
from sbdata.engine._stats import LAZY_STEPS, SBStats

__all__ = [
    "LAZY_STEPS",
    "EngineOptions",
    "ForwardFn",
    "IdKey",
    "KeepArg",
    "LossFn",
    "NanPolicy",
    "PolicyArg",
    "PolicyName",
    "ReduceFn",
    "SBStats",
    "Schedule",
    "ScoreMode",
    "ScoreName",
    "SelectionEngine",
    "SplitFn",
    "SyncMode",
    "should_selective_backprop",
]
