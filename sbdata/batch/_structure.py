"""Structure-preserving operations on batches.

A *batch* is any nesting of mappings, lists, tuples, namedtuples and dataclasses. Its **batch fields** carry one
row per sample and are subset, pooled and joined together:

- tensors and numpy arrays with at least one dimension (rows: the first dimension);
- **columns**: lists and tuples that hold no tensor or array anywhere inside, whatever their items are (keys,
  strings, numbers, ``None``, per-sample dicts such as WebDataset ``.json`` metadata, per-sample lists). A column
  is one field whose items are the samples: it is subset as a whole and never looked into.

A list or tuple that holds a tensor or an array somewhere inside is a **group** of fields (the batch itself, or
``[x1, x2]`` as ``default_collate`` builds for samples with tuple fields) and is looked into, like mappings,
namedtuples and dataclasses. Which containers are columns therefore never depends on the batch size, so a subset
or a pool of kept samples is read exactly like the batch it came from. Everything else (0-dim tensors, Python
scalars, ``None`` outside a column, empty lists) is a non-batch field, passed through unchanged. Every batch field
must have the same number of rows. Every function here keeps the container types of its input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from sbdata.batch._column import KeptColumn, join_columns
from sbdata.batch._fast_path import (
    SEQUENCES,
    disagree,
    pair_group,
    sequence_select,
    sequence_size,
    sequence_to_device,
    tensor_sequence,
)

__all__ = ["as_tensor", "concat", "default_split", "map_fields", "sample_count", "select", "take", "to_device"]


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def _is_sequence(obj: Any) -> bool:
    """A plain list or tuple (not a namedtuple, whose fields are named like a mapping's keys)."""
    return isinstance(obj, (list, tuple)) and not _is_namedtuple(obj)


def _is_array(obj: Any) -> bool:
    """A tensor or numpy array with a leading (batch) dimension."""
    return (isinstance(obj, torch.Tensor) and obj.dim() > 0) or (isinstance(obj, np.ndarray) and obj.ndim > 0)


def _holds_array(obj: Any) -> bool:
    """Whether a tensor or array with a leading dimension is anywhere inside ``obj``."""
    if _is_array(obj):
        return True
    if isinstance(obj, Mapping):
        return any(_holds_array(value) for value in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_holds_array(item) for item in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return any(_holds_array(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    return False


def _is_column(obj: Any) -> bool:
    """A non-empty list/tuple with no tensor or array inside, or a subset of one (a :class:`KeptColumn`): one field
    whose items are the samples."""
    return isinstance(obj, KeptColumn) or (_is_sequence(obj) and len(obj) > 0 and not _holds_array(obj))


def is_batch_field(obj: Any) -> bool:
    """True for fields that carry one row per sample: tensors/arrays with a dimension, and columns."""
    return _is_array(obj) or _is_column(obj)


def _rebuild(template: Any, items: Any) -> Any:
    if isinstance(template, Mapping):
        try:
            return type(template)(items)  # type: ignore[call-arg]  # a concrete mapping type, such as dict
        except TypeError:  # e.g. defaultdict, whose first argument is the factory
            clone = template.copy()  # type: ignore[attr-defined]
            clone.update(items)
            return clone
    if _is_namedtuple(template):
        return type(template)(*items)
    return type(template)(items)


def map_fields(batch: Any, fn: Callable[[Any, str], Any], path: str = "batch") -> Any:
    """Apply ``fn(field, path)`` to every batch field; non-batch leaves are returned as they are."""
    if tensor_sequence(batch):
        return type(batch)([fn(v, f"{path}[{i}]") for i, v in enumerate(batch)])  # the common (x, y) batch
    if pair_group(batch):  # one level more, as the pool's (subset, weights) pieces: the same result, fewer checks
        return type(batch)([v if v is None else map_fields(v, fn, f"{path}[{i}]") for i, v in enumerate(batch)])
    if is_batch_field(batch):
        return fn(batch, path)
    if isinstance(batch, Mapping):
        return _rebuild(batch, {k: map_fields(v, fn, f"{path}[{k!r}]") for k, v in batch.items()})
    if isinstance(batch, (list, tuple)):
        return _rebuild(batch, [map_fields(v, fn, f"{path}[{i}]") for i, v in enumerate(batch)])
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {
            f.name: map_fields(getattr(batch, f.name), fn, f"{path}.{f.name}") for f in dataclasses.fields(batch)
        }
        return dataclasses.replace(batch, **changes)
    return batch


def sample_count(batch: Any) -> int | None:
    """The common leading size of every batch field, or ``None`` if the batch has no batch field.

    Raises:
        ValueError: if two fields disagree, naming both fields and sizes.
    """
    if tensor_sequence(batch):
        return sequence_size(batch)
    sizes: list[tuple[str, int]] = []

    def visit(field: Any, path: str) -> Any:
        sizes.append((path, len(field) if not isinstance(field, (torch.Tensor, np.ndarray)) else field.shape[0]))
        return field

    map_fields(batch, visit)
    if not sizes:
        return None
    first_path, first = sizes[0]
    for path, size in sizes[1:]:
        if size != first:
            disagree(first_path, first, path, size)
    return first


def to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor field to ``device`` (non-blocking where the source is pinned); arrays stay on the host."""
    if tensor_sequence(batch):
        return sequence_to_device(batch, device)

    def move(field: Any, _: str) -> Any:
        if isinstance(field, torch.Tensor) and field.device != device:
            return field.to(device, non_blocking=field.is_pinned())
        return field

    return map_fields(batch, move)


def as_tensor(value: Any, device: torch.device, path: str) -> Any:
    """Turn a numpy array into a tensor on ``device`` for scoring; tensors and nested inputs pass through."""
    if isinstance(value, np.ndarray):
        if value.dtype == np.object_:
            raise TypeError(f"{path} is a numpy array of dtype object, which cannot be scored; decode it first")
        return torch.as_tensor(value, device=device)
    return value


class Indexer:
    """Select the same samples from every field of a batch, given indices on the scoring device.

    Tensor fields are indexed on their device with no host transfer. Numpy fields and, by default, columns (lists,
    tuples) need the indices on the host: they are copied once per batch, on first need (one device-to-host
    transfer, a synchronisation on a GPU), and a column comes out as its own type (a list stays a list). With
    ``lazy_columns=True`` a column becomes a :class:`~sbdata.KeptColumn` holding the indices as they are, read on
    first use (no transfer here).

    Args:
        index: (k,) int64 kept positions, on any device.
        lazy_columns: whether columns become :class:`~sbdata.KeptColumn` instead of lists/tuples.
    """

    def __init__(self, index: torch.Tensor, lazy_columns: bool = False) -> None:
        self.index = index
        self.lazy_columns = lazy_columns
        self._host: np.ndarray | None = None

    def host(self) -> np.ndarray:
        if self._host is None:
            self._host = self.index.cpu().numpy()
        return self._host

    def __call__(self, field: Any, _: str = "") -> Any:
        if isinstance(field, torch.Tensor):
            return field.index_select(0, self.index.to(field.device))
        if isinstance(field, np.ndarray):
            return field[self.host()]
        if isinstance(field, KeptColumn):
            return field.subset(self.index)
        if self.lazy_columns:
            return KeptColumn(field, self.index)
        return type(field)(field[i] for i in self.host().tolist())


def select(batch: Any, index: torch.Tensor, lazy_columns: bool = False) -> Any:
    """The sub-batch at ``index`` (1-D integer tensor), every field aligned, container types preserved; columns
    become :class:`~sbdata.KeptColumn` with ``lazy_columns=True`` (see :class:`Indexer`)."""
    if tensor_sequence(batch):
        return sequence_select(batch, index)
    return map_fields(batch, Indexer(index, lazy_columns))


def take(batch: Any, start: int, stop: int) -> Any:
    """Samples ``start:stop`` of every field (views for tensors and arrays)."""
    return map_fields(
        batch, lambda field, _: field.take(start, stop) if isinstance(field, KeptColumn) else field[start:stop]
    )


def fields(batch: Any) -> list[Any]:
    """The batch fields of ``batch`` in traversal order."""
    found: list[Any] = []

    def collect(field: Any, _: str) -> Any:
        found.append(field)
        return field

    map_fields(batch, collect)
    return found


def concat(batches: Sequence[Any]) -> Any:
    """Join batches of the same structure along the batch dimension.

    Non-batch leaves are taken from the first batch.
    """
    if len(batches) == 1:
        return batches[0]
    columns = [fields(batch) for batch in batches]
    if any(len(column) != len(columns[0]) for column in columns):
        raise ValueError("cannot join batches of different structure: their numbers of batch fields differ")
    joined = iter([_join(list(parts)) for parts in zip(*columns, strict=True)])
    return map_fields(batches[0], lambda _field, _path: next(joined))


def _join(parts: list[Any]) -> Any:
    head = parts[0]
    if isinstance(head, torch.Tensor):
        return torch.cat(parts, dim=0)
    if isinstance(head, np.ndarray):
        return np.concatenate(parts, axis=0)
    if any(isinstance(part, KeptColumn) for part in parts):
        return join_columns(parts)
    return type(head)(item for part in parts for item in part)


def default_split(batch: Any) -> tuple[Any, Any]:
    """Take ``(inputs, targets)`` from a batch.

    Accepted shapes: a tuple/list/namedtuple whose first two fields are the inputs and the targets (further
    fields, such as keys, ride along), or a mapping with ``"input"`` and ``"target"`` keys.

    Raises:
        ValueError: naming what was found and the ``split=`` fix.
    """
    if type(batch) in SEQUENCES and len(batch) >= 2 and type(batch[0]) is torch.Tensor and batch[0].dim() > 0:
        return batch[0], batch[1]  # the common (x, y, ...) batch: not a column, since it holds a tensor
    if isinstance(batch, Mapping):
        if "input" in batch and "target" in batch:
            return batch["input"], batch["target"]
        raise ValueError(
            f"cannot take (inputs, targets) apart from a mapping with keys {sorted(map(str, batch))}: the default "
            "split needs 'input' and 'target' keys; pass split=lambda b: (b['x'], b['y']) naming your keys"
        )
    if isinstance(batch, (list, tuple)) and len(batch) >= 2 and not _is_column(batch):
        return batch[0], batch[1]
    raise ValueError(
        f"cannot take (inputs, targets) apart from a batch of type {type(batch).__name__}: the default split needs "
        "a sequence (inputs, targets, ...) or a mapping with 'input'/'target' keys; pass split= to say how"
    )
