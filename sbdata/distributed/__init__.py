"""Lockstep selection under ``torch.distributed`` (DDP, FSDP, torchrun) and the collectives every distributed part
uses; see ``docs/distributed.md``.

:class:`Lockstep` drives anything that has the :class:`LockstepDriven` methods (the engine does); it imports no
engine.
"""

from sbdata.distributed._collectives import (
    SYNC_MODES,
    gather_padded,
    in_job,
    joined_late,
    lockstep_group,
    merge_latest,
    rank_and_world,
    reduce_min,
    reduce_sum,
    scoring_module,
    takes_cpu_tensors,
)
from sbdata.distributed._lockstep import Lockstep, LockstepDriven, make_lockstep

__all__ = [
    "SYNC_MODES",
    "Lockstep",
    "LockstepDriven",
    "gather_padded",
    "in_job",
    "joined_late",
    "lockstep_group",
    "make_lockstep",
    "merge_latest",
    "rank_and_world",
    "reduce_min",
    "reduce_sum",
    "scoring_module",
    "takes_cpu_tensors",
]
