"""The fast path for the common batch: a plain tuple or list of tensors, such as ``(x, y)``.

Such a batch's fields are its items, so it is sized, moved, split and subset without the general traversal of
:mod:`sbdata.batch`, with the same results: each of ``_batch``'s entry points (``sample_count``, ``to_device``,
``select``, ``default_split``) checks :func:`tensor_sequence` first and takes these, so the dispatch lives in one
place. :func:`pair_group` recognises one level more, the pool's ``(subset, weights)`` pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

RAGGED_FIX = (
    "a list or tuple that holds tensors or arrays is a group of fields, each with one row per sample, while a "
    "column (one item per sample, subset as a whole) holds no tensor or array: pad per-sample tensors of different "
    "lengths into one tensor (with a lengths field), or hold them in a numpy object array (np.empty(B, "
    "dtype=object)); put per-batch constants in 0-dim tensors or Python scalars"
)


SEQUENCES = (tuple, list)  # exact types: a namedtuple or a subclass takes the general path


def tensor_sequence(batch: Any) -> bool:
    """Whether ``batch`` is a plain tuple or list of tensors that all have a batch dimension (the common ``(x, y)``
    batch): its fields are its items, so the ``sequence_*`` functions below may skip the general traversal."""
    return type(batch) in SEQUENCES and all(type(v) is torch.Tensor and v.dim() > 0 for v in batch)


def pair_group(batch: Any) -> bool:
    """Whether ``batch`` is a plain tuple or list of tensor sequences (see :func:`tensor_sequence`), tensors with a
    batch dimension and ``None``, holding a tensor somewhere (so a group, not a column): e.g. the pool's pieces,
    ``((x, y), None)``."""
    if type(batch) not in SEQUENCES:
        return False
    holds = False
    for item in batch:
        if item is None:
            continue
        if type(item) is torch.Tensor:
            if item.dim() == 0:
                return False
            holds = True
        elif tensor_sequence(item):
            holds = holds or len(item) > 0
        else:
            return False
    return holds


def disagree(first_path: str, first: int, path: str, size: int) -> None:
    """Raise the ValueError of two batch fields (at paths ``first_path`` and ``path``) of different sizes."""
    raise ValueError(
        f"batch fields disagree on the batch size: {first_path} has {first} samples but {path} has {size}; "
        f"every tensor, array or column in a batch must share its first dimension; {RAGGED_FIX}"
    )


def sequence_size(batch: Sequence[torch.Tensor]) -> int | None:
    """:func:`sample_count` of a batch for which :func:`tensor_sequence` holds."""
    if not batch:
        return None
    first = batch[0].shape[0]
    for i, field in enumerate(batch):
        if field.shape[0] != first:
            disagree("batch[0]", first, f"batch[{i}]", field.shape[0])
    return first


def sequence_to_device(batch: Any, device: torch.device) -> Any:
    """:func:`to_device` of a batch for which :func:`tensor_sequence` holds."""
    return type(batch)([v if v.device == device else v.to(device, non_blocking=v.is_pinned()) for v in batch])


def sequence_select(batch: Any, index: torch.Tensor) -> Any:
    """:func:`select` of a batch for which :func:`tensor_sequence` holds."""
    return type(batch)([v.index_select(0, index.to(v.device)) for v in batch])
