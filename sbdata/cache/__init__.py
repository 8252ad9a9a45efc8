"""The loss cache: per-sample scores kept between epochs so that fresh ones need no new forward, its two layouts
(dense integer ids, keyed), the observed ids in flight, and :func:`with_index`.
"""

from sbdata.cache._cache import BUCKETS, REFRESH, UNITS, CacheLookup, LossCache, bucket_size
from sbdata.cache._indexed import IndexedDataset, with_index

__all__ = [
    "BUCKETS",
    "REFRESH",
    "UNITS",
    "CacheLookup",
    "IndexedDataset",
    "LossCache",
    "bucket_size",
    "with_index",
]
