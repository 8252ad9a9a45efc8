"""Stale-loss cache: score a sample only when its last known loss is missing or too old."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["CacheLookup", "LossCache", "with_index"]

UNITS = ("epoch", "step")


class IndexedDataset(Dataset):
    """A map-style dataset whose samples also carry their index (see :func:`with_index`)."""

    def __init__(self, dataset: Any, key: str = "index") -> None:
        self.dataset = dataset
        self.key = key

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        sample = self.dataset[index]
        if isinstance(sample, Mapping):
            return {**sample, self.key: index}
        if isinstance(sample, (tuple, list)):
            return (*sample, index)
        return (sample, index)


def with_index(dataset: Any, key: str = "index") -> IndexedDataset:
    """Wrap a map-style dataset so that every sample carries its integer index.

    A tuple sample ``(x, y)`` becomes ``(x, y, index)`` (use ``id_key=-1``); a dict sample gains ``key``
    (use ``id_key=key``); any other sample ``s`` becomes ``(s, index)``.
    """
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise TypeError(
            f"with_index needs a map-style dataset with __getitem__ and __len__, got {type(dataset).__name__}"
        )
    return IndexedDataset(dataset, key)


class CacheLookup:
    """The result of :meth:`LossCache.lookup` for one batch: known losses and the positions still to score."""

    def __init__(self, losses: torch.Tensor, stale: torch.Tensor, handle: Any) -> None:
        self.losses = losses
        self.stale = stale
        self.handle = handle  # ids (dense) or slots (keyed), for storing the fresh losses


class LossCache:
    """Per-sample last known loss and when it was measured, so fresh samples skip the scoring forward.

    Two layouts:

    - **dense** (``size=N``): ids are integers in ``[0, N)``, e.g. from :func:`with_index`. Losses and times live in
      preallocated tensors on the scoring device (8 bytes per sample: float32 loss, int32 time). A lookup finds the
      stale positions with one ``nonzero`` (one small device-to-host transfer per SB step).
    - **keyed** (``capacity=C``): any hashable ids, e.g. WebDataset's ``__key__`` strings, for streams without a
      dense index. At most ``C`` entries; the least recently seen is evicted. Keys and times stay on the host,
      losses in a device tensor of ``C`` slots, so lookups need no device-to-host transfer.

    A cached loss is fresh while ``now - measured <= staleness``, counted in epochs or in loader batches (``unit``).
    Losses enter the cache when a stale sample is scored, and through ``observe`` (the losses the training step
    computed anyway).

    Args:
        staleness: how old (in ``unit``) a cached loss may be and still be used, >= 0. 0 reuses only losses from the
            same epoch (or step). Default 1.
        size: number of samples for the dense layout. Exclusive with ``capacity``.
        capacity: maximum entries for the keyed layout, >= 1. Exclusive with ``size``.
        unit: ``"epoch"`` or ``"step"``. Default ``"epoch"``.
    """

    def __init__(
        self, staleness: int = 1, *, size: int | None = None, capacity: int | None = None, unit: str = "epoch"
    ) -> None:
        if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
            raise ValueError(f"staleness must be an int >= 0 ({unit}s a cached loss stays usable), got {staleness!r}")
        if (size is None) == (capacity is None):
            raise ValueError(
                "LossCache needs exactly one of size= (dense integer ids, e.g. len(dataset)) or capacity= "
                "(a bounded mapping for string keys)"
            )
        for name, value in (("size", size), ("capacity", capacity)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
        self.staleness = staleness
        self.size = size
        self.capacity = capacity
        self.unit = unit
        self._device = torch.device("cpu")
        self._loss = torch.zeros(size or capacity, dtype=torch.float32)
        self._when: torch.Tensor | None = torch.full((size,), -1, dtype=torch.int32) if size is not None else None
        self._slots: OrderedDict[Any, list[int]] = OrderedDict()  # keyed: key -> [slot, measured]

    @property
    def dense(self) -> bool:
        return self.size is not None

    def bind(self, device: torch.device) -> None:
        """Move the cache's tensors to the scoring device (the engine calls this once)."""
        self._device = device
        self._loss = self._loss.to(device)
        if self._when is not None:
            self._when = self._when.to(device)

    def __len__(self) -> int:
        """Samples with a known loss."""
        if self.dense:
            return int((self._when >= 0).sum())
        return len(self._slots)

    def __contains__(self, key: Any) -> bool:
        """Whether a loss is known for ``key`` (an integer id for the dense layout, a key for the keyed one)."""
        if self.dense:
            return 0 <= int(key) < self.size and bool(self._when[int(key)] >= 0)
        return key in self._slots and self._slots[key][1] >= 0

    def memory_bytes(self) -> int:
        """Bytes held: the loss and time tensors, plus an estimate of the keyed layout's host dictionary."""
        held = self._loss.numel() * self._loss.element_size()
        if self._when is not None:
            return held + self._when.numel() * self._when.element_size()
        return held + len(self._slots) * 200  # an OrderedDict entry with a short key and a 2-list, roughly

    # ----------------------------------------------------------------- ids
    def _dense_ids(self, ids: Any) -> torch.Tensor:
        host = np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids)
        if host.ndim != 1 or not np.issubdtype(host.dtype, np.integer):
            raise ValueError(f"a dense LossCache needs 1-D integer ids, got {host.dtype} of shape {host.shape}")
        bad = host[(host < 0) | (host >= self.size)]
        if bad.size:
            raise ValueError(f"ids {bad[:10].tolist()} are outside the dense LossCache's range 0..{self.size - 1}")
        if np.unique(host).size != host.size:
            values, counts = np.unique(host, return_counts=True)
            raise ValueError(f"duplicate ids in one batch: {values[counts > 1][:10].tolist()}; ids must be unique")
        return torch.as_tensor(host, dtype=torch.long, device=self._device)

    @staticmethod
    def _keys(ids: Any) -> list[Any]:
        keys = ids.tolist() if isinstance(ids, (torch.Tensor, np.ndarray)) else list(ids)
        if len(set(keys)) != len(keys):
            seen: set[Any] = set()
            duplicates = [k for k in keys if k in seen or seen.add(k)]
            raise ValueError(f"duplicate ids in one batch: {duplicates[:10]}; ids must be unique")
        return keys

    def _slot(self, key: Any) -> int:
        """The slot of ``key``, making room by evicting the least recently seen entry."""
        if key in self._slots:
            self._slots.move_to_end(key)
            return self._slots[key][0]
        if len(self._slots) < self.capacity:
            slot = len(self._slots)
        else:
            _, (slot, _) = self._slots.popitem(last=False)
        self._slots[key] = [slot, -1]
        return slot

    # ----------------------------------------------------------------- use
    def lookup(self, ids: Any, now: int) -> CacheLookup:
        """Known losses for ``ids`` (stale entries hold 0) and the positions whose loss must be scored."""
        if self.dense:
            index = self._dense_ids(ids)
            when = self._when.index_select(0, index)
            stale = torch.nonzero((when < 0) | (now - when > self.staleness)).squeeze(1)  # the one sync
            return CacheLookup(self._loss.index_select(0, index), stale, index)
        keys = self._keys(ids)
        if len(keys) > self.capacity:
            raise ValueError(
                f"a batch of {len(keys)} ids does not fit a LossCache of capacity {self.capacity}: "
                "the capacity must be at least the loader's batch size"
            )
        fresh_before = [key in self._slots and now - self._slots[key][1] <= self.staleness for key in keys]
        slots = torch.tensor([self._slot(key) for key in keys], dtype=torch.long)
        positions = [i for i, fresh in enumerate(fresh_before) if not fresh]
        for position in positions:
            self._slots[keys[position]][1] = -1  # unknown until scored (the slot may have been reused by eviction)
        slots = slots.to(self._device)
        stale = torch.tensor(positions, dtype=torch.long, device=self._device)
        return CacheLookup(self._loss.index_select(0, slots), stale, (keys, slots, positions))

    def store(self, lookup: CacheLookup, fresh: torch.Tensor, now: int) -> None:
        """Record the losses just scored for ``lookup.stale``."""
        if self.dense:
            index = lookup.handle.index_select(0, lookup.stale)
            self._put_dense(index, fresh, now)
            return
        keys, slots, positions = lookup.handle
        self._loss.index_copy_(0, slots.index_select(0, lookup.stale), fresh.to(torch.float32))
        for position in positions:
            self._slots[keys[position]][1] = now

    def observe(self, ids: Any, losses: torch.Tensor, now: int) -> None:
        """Record per-sample losses computed elsewhere (e.g. by the training step), detached, with no sync."""
        losses = losses.detach().to(self._device, torch.float32)
        if self.dense:
            index = torch.as_tensor(ids, device=self._device).long()
            self._put_dense(index, losses, now)
            return
        keys = self._keys(ids)
        if len(keys) > self.capacity:
            raise ValueError(f"{len(keys)} observed ids do not fit a LossCache of capacity {self.capacity}")
        slots = torch.tensor([self._slot(key) for key in keys], dtype=torch.long, device=self._device)
        self._loss.index_copy_(0, slots, losses)
        for key in keys:
            self._slots[key][1] = now

    def _put_dense(self, index: torch.Tensor, losses: torch.Tensor, now: int) -> None:
        self._loss.index_copy_(0, index, losses.to(torch.float32))
        self._when.index_fill_(0, index, now)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"loss": self._loss.clone()}
        if self.dense:
            state["when"] = self._when.clone()
        else:
            state["slots"] = [(key, slot, when) for key, (slot, when) in self._slots.items()]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["loss"].shape != self._loss.shape:
            raise ValueError(f"saved cache has {state['loss'].shape[0]} entries but this one has {self._loss.shape[0]}")
        self._loss = state["loss"].to(self._device, torch.float32).clone()
        if self.dense:
            self._when = state["when"].to(self._device, torch.int32).clone()
        else:
            self._slots = OrderedDict((key, [int(slot), int(when)]) for key, slot, when in state["slots"])

    def __repr__(self) -> str:
        layout = f"size={self.size}" if self.dense else f"capacity={self.capacity}"
        return f"LossCache(staleness={self.staleness}, {layout}, unit={self.unit!r}, {self.memory_bytes()} bytes)"

    def dense_entries(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense layout only: copies of every sample's last loss and of when it was measured (-1: never), both
        ``(size,)`` on the cache's device (float32 and int32). One read for epoch-level decisions (pruning)."""
        if not self.dense:
            raise ValueError("dense_entries needs a dense LossCache (size=N); a keyed one has no index to read by")
        return self._loss.clone(), self._when.clone()
