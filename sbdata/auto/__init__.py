"""``keep="auto"``: its settings (:class:`Auto`), the trials that measure whether selection pays on the user's run
(:func:`trial_order`, :func:`fit_progress`, :func:`verdict`), and the gain estimate that predicts it (``tau``, the
speed-ups, :class:`CostTable`), all as pure functions. The controller that applies them lives in the engine
(``sbdata.engine``).
"""

from sbdata.auto._gain import (
    CostTable,
    best_keep,
    effective_batch,
    keep_grid,
    pool_speedup,
    progress,
    score_share,
    score_sums,
    shrink_speedup,
    small_batch_speedup,
    speedup_range,
    tau,
    tau_from_sums,
)
from sbdata.auto._settings import Auto, Keep
from sbdata.auto._trials import Progress, Verdict, exposures, fit_progress, shortfall, trial_order, verdict

__all__ = [
    "Auto",
    "CostTable",
    "Keep",
    "Progress",
    "Verdict",
    "best_keep",
    "effective_batch",
    "exposures",
    "fit_progress",
    "keep_grid",
    "pool_speedup",
    "progress",
    "score_share",
    "score_sums",
    "shortfall",
    "shrink_speedup",
    "small_batch_speedup",
    "speedup_range",
    "tau",
    "tau_from_sums",
    "trial_order",
    "verdict",
]
