"""The loss cache: per-sample scores kept between epochs so that fresh ones need no new forward, its two layouts
(dense integer ids, keyed), the observed ids in flight, and :func:`with_index`.

Not user API: this surface serves the layers above it and the benchmarks (a user imports what they need of it from
``sbdata``). Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata.cache import _cache, _indexed
from sbdata.cache._cache import *
from sbdata.cache._indexed import *

__all__ = _cache.__all__ + _indexed.__all__
