"""The engine's output side: what a loader batch yields, importance weights, the pool, and the ready queue."""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

import sbdata.batch as _batch
from sbdata.batch import decode, encode
from sbdata.engine._pool import Pool


class Emitter:
    """Turns what the engine keeps into output batches and holds them until they are handed on.

    Every output is queued with its sample count; :meth:`pop` hands on the oldest. Importance weights (with
    ``return_weights``) are made here and only here, so that ``(weights * per_sample_loss).sum()`` estimates the
    loader batch's (or, pooled, the pooled candidates') mean loss without bias:

    - a plain (unselected) batch of ``n``: ``1 / n`` each;
    - an unpooled subset: ``ratio / (expected * candidates)``, with ``ratio = expected / prob`` per kept sample;
    - a pooled batch (full or the epoch's short rest): ``ratio / batch_size``.

    Args:
        batch_size: samples per output batch through a :class:`~sbdata._pool.Pool`, or None (unpooled).
        drop_last: with ``batch_size``, drop the short rest at the end of the source instead of emitting it.
        return_weights: emit ``(batch, weights)`` pairs instead of batches.
        device: where plain batches' weights are made (the scoring device).
    """

    def __init__(self, batch_size: int | None, drop_last: bool, return_weights: bool, device: torch.device) -> None:
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.return_weights = return_weights
        self.device = device
        self.pool = Pool(batch_size) if batch_size is not None else None
        self.source_ended = False  # the epoch's source has run out and the pool's rest was flushed
        self.ready: deque[tuple[Any, int]] = deque()  # (output, samples), oldest first

    # ----------------------------------------------------------------- filling
    def add_plain(self, batch: Any, size: int) -> None:
        """Queue a whole loader batch of ``size`` samples, unselected (an empty unpooled batch too)."""
        if size == 0 and self.pool is not None:
            return  # a pooled stream never yields an empty batch
        self._put(batch, size, None if size == 0 else torch.full((size,), 1.0 / size, device=self.device))

    def add_kept(self, subset: Any, count: int, ratio: Any, expected: Any, candidates: int, keep_empty: bool) -> None:
        """Queue what an SB step kept (unpooled) or pool it and queue every full batch (pooled).

        An unpooled subset of 0 samples is queued only if ``keep_empty`` (one output per loader batch).
        """
        if self.pool is None:
            if count or keep_empty:
                if self.return_weights:
                    self._put(subset, count, None if ratio is None else ratio / (expected * candidates))
                else:
                    self.ready.append((subset, count))  # _put without weights, inline: once per SB step
            return
        self.pool.add((subset, ratio), count)
        while (full := self.pool.pop_full()) is not None:
            self._put_pooled(full)

    def reopen_source(self) -> None:
        """A source restored together with the engine is asked again, so that it can report its own end."""
        self.source_ended = False

    def end_source(self) -> None:
        """The epoch's source ran out: queue the pool's short rest (unless ``drop_last``)."""
        self.source_ended = True
        if self.pool is None:
            return
        rest = self.pool.pop_rest()
        if rest is not None and not self.drop_last:
            self._put_pooled(rest)

    def _put_pooled(self, piece: tuple[Any, Any]) -> None:
        subset, ratio = piece
        self._put(subset, _batch.sample_count(subset) or 0, None if ratio is None else ratio / self.batch_size)

    def _put(self, batch: Any, size: int, weights: torch.Tensor | None) -> None:
        self.ready.append(((batch, weights) if self.return_weights else batch, size))

    # ----------------------------------------------------------------- emptying
    def __len__(self) -> int:
        """Outputs ready to be handed on."""
        return len(self.ready)

    @property
    def held_samples(self) -> int:
        """Samples in ready outputs and in the pool."""
        return sum(size for _, size in self.ready) + (len(self.pool) if self.pool is not None else 0)

    def pop(self) -> tuple[Any, int]:
        """The oldest ready output and its sample count."""
        return self.ready.popleft()

    def discard_beyond(self, count: int) -> None:
        """Drop the newest ready outputs until at most ``count`` remain (outputs that will never be yielded)."""
        while len(self.ready) > count:
            self.ready.pop()

    def clear(self) -> None:
        """Forget everything held, for a new epoch."""
        self.ready.clear()
        self.source_ended = False
        if self.pool is not None:
            self.pool.clear()

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Ready outputs and pooled pieces, encoded for ``torch.load(..., weights_only=True)``."""
        pool = None
        if self.pool is not None:
            pool = self.pool.state_dict()
            pool["pieces"] = encode(pool["pieces"], "pooled piece")
        return {
            "ready": [[encode(out, "queued batch"), size] for out, size in self.ready],
            "pool": pool,
            "source_ended": self.source_ended,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ready = deque((decode(out), int(size)) for out, size in state["ready"])
        if self.pool is not None:
            self.pool.load_state_dict({**state["pool"], "pieces": decode(state["pool"]["pieces"])})
        self.source_ended = bool(state["source_ended"])
