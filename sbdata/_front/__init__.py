"""What every front end shares (internal): :class:`EngineFront` (statistics, ``observe`` and state around the
engine), the replay of a stateless loader's shuffle, the one-time guards, and the worker/thread checks.
"""

from sbdata._front._base import EngineFront
from sbdata._front._guards import ReadAheadGuard, warn_if_other_rank, warn_if_unsharded
from sbdata._front._order import SamplerOrder
from sbdata._front._placement import check_not_in_worker, check_thread

__all__ = [
    "EngineFront",
    "ReadAheadGuard",
    "SamplerOrder",
    "check_not_in_worker",
    "check_thread",
    "warn_if_other_rank",
    "warn_if_unsharded",
]
