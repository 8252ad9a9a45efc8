"""The pool that turns variable-size kept subsets into output batches of one fixed size."""

from __future__ import annotations

from typing import Any

from sbdata.batch import concat, take


class Pool:
    """Holds kept samples, on the scoring device, until they fill an output batch of ``batch_size``.

    Pieces are joined only when a full batch can be cut, and what is left over becomes a single piece, so each
    sample is copied at most twice. Since the engine cuts every full batch as soon as it exists, the pool never
    holds more than ``batch_size - 1`` samples between loader batches, and at most one output batch plus one
    incoming batch while it is being cut.

    Args:
        batch_size: samples per output batch, >= 1.
    """

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self._pieces: list[Any] = []
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, piece: Any, size: int) -> None:
        """Add ``size`` samples (a batch structure whose fields all have ``size`` rows)."""
        if size:
            self._pieces.append(piece)
            self._size += size

    def pop_full(self) -> Any | None:
        """An output batch of exactly ``batch_size`` samples, oldest first, or None if the pool holds fewer."""
        if self._size < self.batch_size:
            return None
        joined = concat(self._pieces)
        out = take(joined, 0, self.batch_size)
        self._size -= self.batch_size
        self._pieces = [take(joined, self.batch_size, self.batch_size + self._size)] if self._size else []
        return out

    def pop_rest(self) -> Any | None:
        """Everything left (fewer than ``batch_size`` samples), or None when empty."""
        if not self._size:
            return None
        out = concat(self._pieces)
        self.clear()
        return out

    def clear(self) -> None:
        self._pieces, self._size = [], 0

    def state_dict(self) -> dict[str, Any]:
        return {"pieces": list(self._pieces), "size": self._size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pieces = list(state["pieces"])
        self._size = int(state["size"])
