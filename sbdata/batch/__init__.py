"""Batches as the loader made them: structure-preserving operations, the ``(x, y)`` fast path, list/tuple columns
subset lazily (:class:`KeptColumn`), the ``weights_only`` codec for held batches, and host copies that never wait.

The bottom layer of sbdata: it imports nothing else of the package but :mod:`sbdata._util`.
"""

from sbdata.batch._codec import decode, encode
from sbdata.batch._column import KeptColumn, join_columns
from sbdata.batch._hostcopy import HostCopy, upload
from sbdata.batch._structure import (
    Indexer,
    as_tensor,
    concat,
    default_split,
    fields,
    is_batch_field,
    map_fields,
    sample_count,
    select,
    take,
    to_device,
)

__all__ = [
    "HostCopy",
    "Indexer",
    "KeptColumn",
    "as_tensor",
    "concat",
    "decode",
    "default_split",
    "encode",
    "fields",
    "is_batch_field",
    "join_columns",
    "map_fields",
    "sample_count",
    "select",
    "take",
    "to_device",
    "upload",
]
