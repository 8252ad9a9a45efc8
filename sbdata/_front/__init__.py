"""What every front end shares (internal): :class:`EngineFront` (statistics, ``observe`` and state around the
engine), the replay of a stateless loader's shuffle, the one-time guards, the worker/thread checks, and what a
wrapped loader shows where the loader it replaced stood (its dataset, its batches per epoch).

Not user API: this surface serves the layers above it and the benchmarks (a user imports what they need of it from
``sbdata``). Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata._front import _base, _guards, _order, _placement, _replaced_loader
from sbdata._front._base import *
from sbdata._front._guards import *
from sbdata._front._order import *
from sbdata._front._placement import *
from sbdata._front._replaced_loader import *

__all__ = _base.__all__ + _guards.__all__ + _order.__all__ + _placement.__all__ + _replaced_loader.__all__
