"""``keep="auto"``: its settings (:class:`Auto`) and the gain estimate as pure functions (``tau``, the speed-ups,
``best_keep``, :class:`CostTable`). The controller that applies them lives in the engine (``sbdata.engine``).
"""

from sbdata.auto._gain import (
    CostTable,
    best_keep,
    effective_batch,
    keep_grid,
    pool_speedup,
    score_share,
    score_sums,
    shrink_speedup,
    tau,
    tau_from_sums,
)
from sbdata.auto._settings import BIASED_MIN_KEEP, UNBIASED_MIN_KEEP, Auto, as_auto

__all__ = [
    "BIASED_MIN_KEEP",
    "UNBIASED_MIN_KEEP",
    "Auto",
    "CostTable",
    "as_auto",
    "best_keep",
    "effective_batch",
    "keep_grid",
    "pool_speedup",
    "score_share",
    "score_sums",
    "shrink_speedup",
    "tau",
    "tau_from_sums",
]
