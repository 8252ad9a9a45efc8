"""Lockstep selection under ``torch.distributed`` (DDP, FSDP, torchrun) and the collectives every distributed part
uses; see ``docs/distributed.md``.

:class:`Lockstep` drives anything that has the :class:`LockstepDriven` methods (the engine does); it imports no
engine.

Not user API: this surface serves the layers above it and the benchmarks (a user imports what they need of it from
``sbdata``). Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata.distributed import _collectives, _lockstep
from sbdata.distributed._collectives import *
from sbdata.distributed._lockstep import *

__all__ = _collectives.__all__ + _lockstep.__all__
