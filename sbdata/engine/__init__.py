"""The selection engine: the one place where loader batches are scored, selected, pooled and emitted; its typed
options, the schedule, the statistics, and (internal) its parts: passes, intake, the SB step, the emitter and pool,
the non-finite check. ``keep=``'s route (fixed, or ``keep="auto"``'s trials) lives in ``sbdata.auto``. See
``docs/design.md``.

Not user API: this surface serves the layers above it and the benchmarks (a user imports what they need of it from
``sbdata``). Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata.engine import _engine, _options, _schedule, _stats
from sbdata.engine._engine import *
from sbdata.engine._options import *
from sbdata.engine._schedule import *
from sbdata.engine._stats import *

__all__ = _engine.__all__ + _options.__all__ + _schedule.__all__ + _stats.__all__
