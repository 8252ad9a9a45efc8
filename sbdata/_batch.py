"""Structure-preserving operations on batches.

A *batch* is any nesting of mappings, tuples, lists and namedtuples whose leaves are either **batch fields**
(tensors or numpy arrays with a leading batch dimension, lists/tuples of strings, bytes or numbers such as
WebDataset's ``__key__``) or **non-batch fields** (0-dim tensors, Python scalars, ``None``), which are passed
through unchanged. Every function here keeps the container types of its input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

_SCALARS = (str, bytes, int, float, bool, type(None))


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def _is_leaf_sequence(obj: Any) -> bool:
    """A non-empty list/tuple of scalars (e.g. ``__key__`` strings) is one batch field, not a container."""
    return (
        isinstance(obj, (list, tuple))
        and not _is_namedtuple(obj)
        and len(obj) > 0
        and all(isinstance(item, _SCALARS) for item in obj)
    )


def is_batch_field(obj: Any) -> bool:
    """True for leaves that carry a leading batch dimension."""
    if isinstance(obj, torch.Tensor):
        return obj.dim() > 0
    if isinstance(obj, np.ndarray):
        return obj.ndim > 0
    return _is_leaf_sequence(obj)


def _rebuild(template: Any, items: Any) -> Any:
    if isinstance(template, Mapping):
        try:
            return type(template)(items)
        except TypeError:  # e.g. defaultdict, whose first argument is the factory
            clone = template.copy()
            clone.update(items)
            return clone
    if _is_namedtuple(template):
        return type(template)(*items)
    return type(template)(items)


def map_fields(batch: Any, fn: Callable[[Any, str], Any], path: str = "batch") -> Any:
    """Apply ``fn(field, path)`` to every batch field; non-batch leaves are returned as they are."""
    if type(batch) in (tuple, list) and all(type(v) is torch.Tensor and v.dim() > 0 for v in batch):
        return type(batch)([fn(v, f"{path}[{i}]") for i, v in enumerate(batch)])  # the common (x, y) batch
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


def batch_size(batch: Any) -> int | None:
    """The common leading size of every batch field, or ``None`` if the batch has no batch field.

    Raises:
        ValueError: if two fields disagree, naming both fields and sizes.
    """
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
            raise ValueError(
                f"batch fields disagree on the batch size: {first_path} has {first} samples but {path} has {size}; "
                "every tensor, array or list in a batch must share its first dimension (put per-batch constants "
                "in 0-dim tensors or Python scalars)"
            )
    return first


def to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor field to ``device`` (non-blocking where the source is pinned); arrays stay on the host."""

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

    Tensor fields are indexed on their device with no host transfer. Numpy and list fields need the indices on
    the host: they are copied once per batch, on first need (one device-to-host transfer).
    """

    def __init__(self, index: torch.Tensor) -> None:
        self.index = index
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
        return type(field)(field[i] for i in self.host())


def select(batch: Any, index: torch.Tensor) -> Any:
    """The sub-batch at ``index`` (1-D integer tensor), every field aligned, container types preserved."""
    return map_fields(batch, Indexer(index))


def take(batch: Any, start: int, stop: int) -> Any:
    """Samples ``start:stop`` of every field (views for tensors and arrays)."""
    return map_fields(batch, lambda field, _: field[start:stop])


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
    return type(head)(item for part in parts for item in part)


def default_split(batch: Any) -> tuple[Any, Any]:
    """Take ``(inputs, targets)`` from a batch.

    Accepted shapes: a tuple/list/namedtuple whose first two fields are the inputs and the targets (further
    fields, such as keys, ride along), or a mapping with ``"input"`` and ``"target"`` keys.

    Raises:
        ValueError: naming what was found and the ``split=`` fix.
    """
    if isinstance(batch, Mapping):
        if "input" in batch and "target" in batch:
            return batch["input"], batch["target"]
        raise ValueError(
            f"cannot take (inputs, targets) apart from a mapping with keys {sorted(map(str, batch))}: the default "
            "split needs 'input' and 'target' keys; pass split=lambda b: (b['x'], b['y']) naming your keys"
        )
    if isinstance(batch, (list, tuple)) and len(batch) >= 2 and not _is_leaf_sequence(batch):
        return batch[0], batch[1]
    raise ValueError(
        f"cannot take (inputs, targets) apart from a batch of type {type(batch).__name__}: the default split needs "
        "a sequence (inputs, targets, ...) or a mapping with 'input'/'target' keys; pass split= to say how"
    )
