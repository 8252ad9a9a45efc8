"""Batches as the loader made them: structure-preserving operations, the ``(x, y)`` fast path, list/tuple columns
subset lazily (:class:`KeptColumn`), the ``weights_only`` codec for held batches, and host copies that never wait.

The bottom layer of sbdata: it imports nothing else of the package but :mod:`sbdata._util`.

Not user API: this surface serves the layers above it and the benchmarks (a user imports what they need of it from
``sbdata``). Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata.batch import _codec, _column, _hostcopy, _structure
from sbdata.batch._codec import *
from sbdata.batch._column import *
from sbdata.batch._hostcopy import *
from sbdata.batch._structure import *

__all__ = _codec.__all__ + _column.__all__ + _hostcopy.__all__ + _structure.__all__
