"""A column of host values subset by kept indices that are still on the device, read on first use.

Selection runs on the scoring device, so the kept indices are a device tensor. A host column of the batch (a list or
tuple of keys, strings, per-sample records) can only be subset once those indices are on the host, and copying them
there makes the host wait for the device. By default the engine pays that copy once per SB step, so that the column
arrives as a list or tuple; with ``lazy_columns=True`` :class:`KeptColumn` defers the read: the SB step hands on the
column's values and the kept indices as they are, and the first read of an item (``len()`` excepted) copies the
indices once.
``observe()`` and the engine's own operations (a further subset, ``take``) never read it, so a loop that passes the
column back to ``observe`` without reading it causes no synchronisation at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import torch

__all__ = ["KeptColumn"]


class KeptColumn(Sequence[Any]):
    """The kept items of a host column: ``source[i] for i in positions``, resolved when first read.

    A read-only sequence: ``len()`` (known on the host, no wait), indexing, iteration, ``in``, ``==`` against any
    list or tuple, ``list(column)``. The first read other than ``len()`` copies the kept indices to the host once
    (on a GPU, a wait for the selection); :meth:`values` returns the items as the source's own type (list or tuple).

    Args:
        source: the loader batch's column (list or tuple) the samples were kept from.
        positions: (k,) int64 kept positions into ``source``, on any device (the attribute of the same name).
    """

    __slots__ = ("_resolved", "positions", "source")
    __hash__ = None  # type: ignore[assignment]  # mutable-like (resolved lazily); compared by value

    def __init__(self, source: list[Any] | tuple[Any, ...], positions: torch.Tensor) -> None:
        self.source = source
        self.positions = positions
        self._resolved: list[Any] | tuple[Any, ...] | None = None

    @property
    def resolved(self) -> bool:
        """Whether the items have been read (the kept indices copied to the host)."""
        return self._resolved is not None

    def values(self) -> list[Any] | tuple[Any, ...]:
        """The kept items, as the source's type (``list`` or ``tuple``); the first call copies the indices."""
        if self._resolved is None:
            self._resolved = type(self.source)(self.source[i] for i in self.positions.cpu().tolist())
        return self._resolved

    def subset(self, index: torch.Tensor) -> KeptColumn:
        """The items at ``index`` (positions into this column, on the device): composed, nothing read."""
        return KeptColumn(self.source, self.positions.index_select(0, index.to(self.positions.device)))

    def take(self, start: int, stop: int) -> KeptColumn:
        """Items ``start:stop``, nothing read."""
        return KeptColumn(self.source, self.positions[start:stop])

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    @overload
    def __getitem__(self, position: int) -> Any: ...

    @overload
    def __getitem__(self, position: slice) -> list[Any] | tuple[Any, ...]: ...

    def __getitem__(self, position: int | slice) -> Any:
        return self.values()[position]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values())

    def __contains__(self, item: object) -> bool:
        return item in self.values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeptColumn):
            return list(self.values()) == list(other.values())
        if isinstance(other, (list, tuple)):
            return list(self.values()) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"KeptColumn({list(self.values())!r})"


def join_columns(parts: Sequence[Any]) -> KeptColumn:
    """Columns (kept or plain lists/tuples) joined end to end, nothing read: their sources are joined on the host and
    the kept indices offset on the device."""
    kept = next(part for part in parts if isinstance(part, KeptColumn))
    device = kept.positions.device
    sources: list[Any] = []
    indices = []
    for part in parts:
        if isinstance(part, KeptColumn):
            source, index = part.source, part.positions.to(device)
        else:
            source, index = part, torch.arange(len(part), device=device)
        indices.append(index + len(sources))
        sources.extend(source)
    return KeptColumn(type(kept.source)(sources), torch.cat(indices))
