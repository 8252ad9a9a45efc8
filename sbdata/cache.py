"""Stale-loss cache: score a sample only when its last known loss is missing or too old."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ._hostcopy import HostCopy, upload

__all__ = ["BUCKETS", "CacheLookup", "LossCache", "bucket_size", "with_index"]

UNITS = ("epoch", "step")
BUCKETS = 4  # distinct sizes of a stale subset's scoring forward (plus the short last batch's)


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


def bucket_size(stale: int, n: int, largest: int) -> int:
    """How many samples to score when ``stale`` of a batch of ``n`` need a fresh loss: 0 when none does, else
    ``stale`` rounded up to a multiple of ``ceil(largest / BUCKETS)`` and capped at ``n``.

    ``largest`` is the largest batch the cache has seen, so a run scores in at most ``BUCKETS`` sizes, plus the
    short last batch's: few enough shapes for ``torch.compile(dynamic=False)`` and for kernel libraries that set
    up each new shape once. The padding is filled with the batch's stalest fresh samples, which are scored too.
    """
    if stale == 0:
        return 0
    quantum = -(-largest // BUCKETS)
    return min(n, -(-stale // quantum) * quantum)


class CacheLookup:
    """The result of :meth:`LossCache.lookup` for one batch: the known losses and the positions to score.

    Attributes:
        losses: (N,) cached losses on the scoring device (positions to score hold a meaningless value).
        positions: (count,) ascending positions to score, on the scoring device.
        count: how many positions to score (a bucket size; see :func:`bucket_size`).
        stale: how many of them had no fresh loss (the rest are the stalest fresh ones, scored to fill the bucket).
    """

    def __init__(self, losses: torch.Tensor, positions: torch.Tensor, count: int, stale: int, handle: Any) -> None:
        self.losses = losses
        self.positions = positions
        self.count = count
        self.stale = stale
        self.handle = handle  # (ids on the device, scored ids) or (slots, scored keys), for store()


class LossCache:
    """Per-sample last known loss and when it was measured, so fresh samples skip the scoring forward.

    Two layouts:

    - **dense** (``size=N``): ids are integers in ``[0, N)``, e.g. from :func:`with_index`. Losses live in a
      preallocated tensor on the scoring device (float32), the times they were measured in a host array (int32):
      8 bytes per sample.
    - **keyed** (``capacity=C``): any hashable ids, e.g. WebDataset's ``__key__`` strings, for streams without a
      dense index. At most ``C`` entries; the least recently seen is evicted. Keys and times stay on the host,
      losses in a device tensor of ``C`` slots.

    Either way the host knows which samples are stale from the ids alone (read before the batch moves to the
    device), so a lookup never waits for the device: it gathers the cached losses and says which positions to
    score, a bucket of the stalest (:func:`bucket_size`). Losses handed to ``observe`` are written on the device at
    once; their ids reach the host's times asynchronously (:class:`~sbdata._hostcopy.HostCopy`), so an observed
    sample looked up again before its ids have landed (a few steps) is scored rather than reused.

    A cached loss is fresh while ``now - measured <= staleness``, counted in epochs or in loader batches (``unit``).
    Losses enter the cache when a sample is scored, and through ``observe`` (the losses the training step computed
    anyway).

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
        self._when: np.ndarray | None = np.full(size, -1, dtype=np.int32) if size is not None else None
        self._slots: OrderedDict[Any, list[int]] = OrderedDict()  # keyed: key -> [slot, measured]
        self._observed: deque[tuple[HostCopy, int, torch.Tensor | None]] = deque()  # ids on their way to the host
        self._largest = 0  # the largest batch looked up: the bucket grid

    @property
    def dense(self) -> bool:
        return self.size is not None

    def bind(self, device: torch.device) -> None:
        """Move the cache's losses to the scoring device (the engine calls this once)."""
        self._device = device
        self._loss = self._loss.to(device)

    def __len__(self) -> int:
        """Samples with a known loss."""
        self._land(wait=True)
        if self.dense:
            return int((self._when >= 0).sum())
        return len(self._slots)

    def __contains__(self, key: Any) -> bool:
        """Whether a loss is known for ``key`` (an integer id for the dense layout, a key for the keyed one)."""
        self._land(wait=True)
        if self.dense:
            return 0 <= int(key) < self.size and bool(self._when[int(key)] >= 0)
        return key in self._slots and self._slots[key][1] >= 0

    def memory_bytes(self) -> int:
        """Bytes held: the loss tensor and the times, plus an estimate of the keyed layout's host dictionary."""
        held = self._loss.numel() * self._loss.element_size()
        if self._when is not None:
            return held + self._when.nbytes
        return held + len(self._slots) * 200  # an OrderedDict entry with a short key and a 2-list, roughly

    # ----------------------------------------------------------------- ids
    def _dense_ids(self, ids: Any) -> np.ndarray:
        host = np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids)
        if host.ndim != 1 or not np.issubdtype(host.dtype, np.integer):
            raise ValueError(f"a dense LossCache needs 1-D integer ids, got {host.dtype} of shape {host.shape}")
        if host.size and (host.min() < 0 or host.max() >= self.size):
            bad = host[(host < 0) | (host >= self.size)]
            raise ValueError(f"ids {bad[:10].tolist()} are outside the dense LossCache's range 0..{self.size - 1}")
        ordered = np.sort(host)
        if ordered.size > 1 and (ordered[1:] == ordered[:-1]).any():
            values, counts = np.unique(host, return_counts=True)
            raise ValueError(f"duplicate ids in one batch: {values[counts > 1][:10].tolist()}; ids must be unique")
        return host

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
    def _plan(self, measured: np.ndarray, now: int) -> tuple[np.ndarray, int]:
        """Ascending positions to score, given when each sample's loss was measured (-1: never), and the stale count."""
        n = measured.shape[0]
        self._largest = max(self._largest, n)
        stale = int(((measured < 0) | (now - measured > self.staleness)).sum())
        count = bucket_size(stale, n, self._largest)
        if count == n:
            return np.arange(n), stale
        return np.sort(np.argsort(measured, kind="stable")[:count]), stale  # the stalest first: the stale ones

    def lookup(self, ids: Any, now: int) -> CacheLookup:
        """Known losses for ``ids`` (host ids) and the positions whose loss must be scored; never waits."""
        self._land(wait=False)
        if self.dense:
            host = self._dense_ids(ids)
            positions, stale = self._plan(self._when[host], now)
            index = upload(host, self._device)
            losses, count = self._loss.index_select(0, index), positions.shape[0]
            return CacheLookup(losses, upload(positions, self._device), count, stale, (index, host[positions]))
        keys = self._keys(ids)
        if len(keys) > self.capacity:
            raise ValueError(
                f"a batch of {len(keys)} ids does not fit a LossCache of capacity {self.capacity}: "
                "the capacity must be at least the loader's batch size"
            )
        measured = np.array([self._slots[key][1] if key in self._slots else -1 for key in keys], dtype=np.int64)
        slots = upload([self._slot(key) for key in keys], self._device)
        positions, stale = self._plan(measured, now)
        scored = [keys[position] for position in positions.tolist()]
        for key in scored:
            self._slots[key][1] = -1  # unknown until scored (the slot may have been reused by eviction)
        return CacheLookup(
            self._loss.index_select(0, slots), upload(positions, self._device), len(scored), stale, (slots, scored)
        )

    def store(self, lookup: CacheLookup, fresh: torch.Tensor, now: int) -> None:
        """Record the losses just scored for ``lookup.positions``."""
        if self.dense:
            index, scored = lookup.handle
            self._loss.index_copy_(0, index.index_select(0, lookup.positions), fresh.to(torch.float32))
            self._when[scored] = now
            return
        slots, scored = lookup.handle
        self._loss.index_copy_(0, slots.index_select(0, lookup.positions), fresh.to(torch.float32))
        for key in scored:
            self._slots[key][1] = now

    def observe(self, ids: Any, losses: torch.Tensor, now: int) -> None:
        """Record per-sample losses computed elsewhere (e.g. by the training step), detached, with no sync.

        Tensor ids (the yielded batch's, on the device) reach the host's bookkeeping asynchronously; they are
        checked when they land. Host ids (lists, arrays) are checked and recorded at once.
        """
        losses = losses.detach().to(self._device, torch.float32)
        if isinstance(ids, torch.Tensor):
            if self.dense:
                index = ids.to(self._device).long()
                self._loss.index_copy_(0, index, losses)
                self._observed.append((HostCopy(index), now, None))
            else:
                self._observed.append((HostCopy(ids), now, losses.clone()))
            return
        if self.dense:
            host = self._dense_ids(ids)
            self._loss.index_copy_(0, upload(host, self._device), losses)
            self._when[host] = np.maximum(self._when[host], now)
            return
        self._observe_keys(self._keys(ids), losses, now)

    def _observe_keys(self, keys: list[Any], losses: torch.Tensor, now: int) -> None:
        if len(keys) > self.capacity:
            raise ValueError(f"{len(keys)} observed ids do not fit a LossCache of capacity {self.capacity}")
        slots = upload([self._slot(key) for key in keys], self._device)
        self._loss.index_copy_(0, slots, losses)
        for key in keys:
            self._slots[key][1] = now

    def _land(self, wait: bool) -> None:
        """Apply observed ids that have reached the host (all of them with ``wait``, a synchronisation)."""
        while self._observed and (wait or self._observed[0][0].ready()):
            copy, now, losses = self._observed.popleft()
            ids = copy.value()
            if losses is None:
                ids = self._dense_ids(ids)
                self._when[ids] = np.maximum(self._when[ids], now)
            else:
                self._observe_keys(self._keys(ids), losses, now)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        self._land(wait=True)
        state: dict[str, Any] = {"loss": self._loss.clone(), "largest": self._largest}
        if self.dense:
            state["when"] = torch.from_numpy(self._when.copy())
        else:
            state["slots"] = [(key, slot, when) for key, (slot, when) in self._slots.items()]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["loss"].shape != self._loss.shape:
            raise ValueError(f"saved cache has {state['loss'].shape[0]} entries but this one has {self._loss.shape[0]}")
        self._loss = state["loss"].to(self._device, torch.float32).clone()
        self._observed.clear()
        self._largest = int(state.get("largest", 0))
        if self.dense:
            self._when = state["when"].cpu().numpy().astype(np.int32)
        else:
            self._slots = OrderedDict((key, [int(slot), int(when)]) for key, slot, when in state["slots"])

    def __repr__(self) -> str:
        layout = f"size={self.size}" if self.dense else f"capacity={self.capacity}"
        return f"LossCache(staleness={self.staleness}, {layout}, unit={self.unit!r}, {self.memory_bytes()} bytes)"
