"""What every front end shares (internal): :class:`EngineFront` (statistics, ``observe`` and state around the
engine), the replay of a stateless loader's shuffle, the one-time guards, the worker/thread checks, and what a
wrapped loader shows where the loader it replaced stood (its dataset, its batches per epoch).
"""

from sbdata._front._base import EngineFront
from sbdata._front._guards import ReadAheadGuard, warn_if_other_rank, warn_if_unsharded
from sbdata._front._order import SamplerOrder
from sbdata._front._placement import check_not_in_worker, check_thread
from sbdata._front._replaced_loader import SelectedDataset, check_not_rebuilt, pooled_batches_per_epoch, reader_frame

__all__ = [
    "EngineFront",
    "ReadAheadGuard",
    "SamplerOrder",
    "SelectedDataset",
    "check_not_in_worker",
    "check_not_rebuilt",
    "check_thread",
    "pooled_batches_per_epoch",
    "reader_frame",
    "warn_if_other_rank",
    "warn_if_unsharded",
]
