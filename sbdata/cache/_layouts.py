"""The two layouts behind :class:`~sbdata.LossCache`: dense integer ids, or any hashable keys in a bounded mapping.

A table holds per-sample losses on the scoring device and, on the host, when each was measured; it knows its ids
(checks them, finds their entries, marks them scored) but nothing of staleness or buckets, which the cache decides
the same way for both layouts. Ids handed to ``observe`` on the device (a tensor, or a :class:`~sbdata.KeptColumn`)
reach the host in groups (``_inflight.py``): no copy per call; :meth:`LossTable.land` applies those that have
arrived, and all of them when asked to wait (``state_dict``, ``len``, ``in``).

An observed loss restamps its samples (``restamp``, the cache's ``refresh="observed"``) or only replaces their
values (stamping those never measured). Either way no recorded time is later than its value's: the bound holds; and
in either layout and mode an observation that lands after a later scoring of the same sample leaves that newer
value and its time in place.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

import numpy as np
import torch

from sbdata.batch import KeptColumn, upload
from sbdata.cache._inflight import InFlight, Observation

HostIds = TypeVar("HostIds")  # one batch's ids on the host: an int array (dense) or a list of keys (keyed)


class LossTable(Generic[HostIds]):
    """Per-sample last known losses (float32, on the scoring device) and when they were measured (on the host).

    Args:
        entries: losses held: the dense size or the keyed capacity, >= 1 (checked by the cache).

    Attributes:
        loss: ``(entries,)`` float32 losses on :attr:`device` (an entry never measured holds a meaningless value).
        device: the scoring device (the CPU until :meth:`bind`).
        in_flight: observed ids on their way to the host (:class:`~sbdata._inflight.InFlight`).
    """

    def __init__(self, entries: int) -> None:
        self.device = torch.device("cpu")
        self.loss = torch.zeros(entries, dtype=torch.float32)
        self.in_flight = InFlight()

    def bind(self, device: torch.device) -> None:
        """Move the losses to the scoring device."""
        self.device = device
        self.loss = self.loss.to(device)

    def land(self, wait: bool) -> None:
        """Apply observed ids that have reached the host (all of them with ``wait``, a synchronisation)."""
        for ids, observation in self.in_flight.landed(wait):
            if observation.losses is None:  # written on the device already: the times alone
                self._landed(ids, observation.now, observation.restamp)
            else:
                self.observe_host(self.host_ids(ids), observation.losses, observation.now, observation.restamp)

    def observe_kept(self, column: KeptColumn, losses: torch.Tensor, now: int, restamp: bool) -> None:
        """Record float32 ``losses`` for the ids in a column kept by the SB step (its indices still on the device):
        written once the indices have reached the host, nothing read now."""
        self.in_flight.add(Observation(column.positions, now, losses.clone(), restamp, column.source))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the losses and the layout's times from a :class:`~sbdata.LossCache` state (shape checked)."""
        self.loss = state["loss"].to(self.device, torch.float32).clone()
        self.in_flight.clear()
        self._load_times(state)

    # ----------------------------------------------------------------- the layout's own
    def host_ids(self, ids: Any) -> HostIds:
        """One batch's ids on the host, checked (ValueError naming the bad ones)."""
        raise NotImplementedError

    def locate(self, ids: HostIds) -> tuple[np.ndarray, torch.Tensor]:
        """When each id's loss was measured (-1: never) and the ids' entries on the device, making room for new
        ones (keyed)."""
        raise NotImplementedError

    def claim(self, ids: HostIds, positions: np.ndarray) -> HostIds:
        """The ids at ``positions`` (about to be scored): unknown until :meth:`stamp` (keyed)."""
        raise NotImplementedError

    def stamp(self, ids: HostIds, now: int) -> None:
        """Record that the losses of ``ids`` were measured at ``now`` (their losses already written)."""
        raise NotImplementedError

    def observe_device(self, ids: torch.Tensor, losses: torch.Tensor, now: int, restamp: bool) -> None:
        """Record float32 ``losses`` on the device for device ``ids``, which reach the host later; ``restamp``: the
        samples count as measured at ``now`` (else only those never measured do)."""
        raise NotImplementedError

    def observe_host(self, ids: HostIds, losses: torch.Tensor, now: int, restamp: bool) -> None:
        """Record float32 ``losses`` on the device for checked host ``ids`` (``restamp``: as :meth:`observe_device`),
        except where a sample was measured after ``now`` (an observation landing late): that value stays."""
        raise NotImplementedError

    def _landed(self, ids: Any, now: int, restamp: bool) -> None:
        """Apply the times of observed ids whose losses were written on the device when observed."""
        raise NotImplementedError

    def known(self) -> int:
        """Samples with a known loss (landed ones only)."""
        raise NotImplementedError

    def has(self, key: Any) -> bool:
        """Whether a loss is known for ``key``."""
        raise NotImplementedError

    def memory_bytes(self) -> int:
        """Bytes held: the losses and the times (estimated for the keyed layout's dictionary)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The times, as the cache's state has always held them: ``when`` (dense) or ``slots`` (keyed)."""
        raise NotImplementedError

    def _load_times(self, state: dict[str, Any]) -> None:
        raise NotImplementedError


class DenseTable(LossTable[np.ndarray]):
    """Integer ids in ``[0, size)``: losses in a device tensor, measure times in a host int32 array (8 B/sample)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size
        self.when = np.full(size, -1, dtype=np.int32)

    def host_ids(self, ids: Any) -> np.ndarray:
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

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
        return self.when[ids], upload(ids, self.device)

    def claim(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return ids[positions]

    def stamp(self, ids: np.ndarray, now: int) -> None:
        self.when[ids] = now

    def observe_device(self, ids: torch.Tensor, losses: torch.Tensor, now: int, restamp: bool) -> None:
        index = ids.to(self.device).long()
        self.loss.index_copy_(0, index, losses)  # in stream order: a later scoring's store overwrites it
        self.in_flight.add(Observation(index, now, None, restamp, None))

    def observe_host(self, ids: np.ndarray, losses: torch.Tensor, now: int, restamp: bool) -> None:
        newer = np.flatnonzero(self.when[ids] <= now)
        if newer.size < ids.size:  # measured since: those values stay
            ids, losses = ids[newer], losses.index_select(0, upload(newer, self.device))
        self.loss.index_copy_(0, upload(ids, self.device), losses)
        self._raise_times(ids, now, restamp)

    def _landed(self, ids: Any, now: int, restamp: bool) -> None:
        self._raise_times(self.host_ids(ids), now, restamp)

    def _raise_times(self, ids: np.ndarray, now: int, restamp: bool) -> None:
        """Raise the times of ``ids`` to ``now`` (``restamp``), or stamp only those never measured."""
        when = self.when[ids]
        self.when[ids] = np.maximum(when, now) if restamp else np.where(when < 0, now, when)

    def known(self) -> int:
        return int((self.when >= 0).sum())

    def has(self, key: Any) -> bool:
        return 0 <= int(key) < self.size and bool(self.when[int(key)] >= 0)

    def memory_bytes(self) -> int:
        return self.loss.numel() * self.loss.element_size() + self.when.nbytes

    def state_dict(self) -> dict[str, Any]:
        return {"when": torch.from_numpy(self.when.copy())}

    def _load_times(self, state: dict[str, Any]) -> None:
        self.when = state["when"].cpu().numpy().astype(np.int32)


class KeyedTable(LossTable[list[Hashable]]):
    """Any hashable ids, at most ``capacity`` of them, the least recently seen evicted first: keys and measure
    times in a host ``OrderedDict`` (key -> ``[slot, measured]``), losses in ``capacity`` device slots."""

    ENTRY_BYTES = 200  # an OrderedDict entry with a short key and a 2-list, roughly

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.capacity = capacity
        self.slots: OrderedDict[Hashable, list[int]] = OrderedDict()

    def host_ids(self, ids: Any) -> list[Hashable]:
        keys = ids.tolist() if isinstance(ids, (torch.Tensor, np.ndarray)) else list(ids)
        if len(set(keys)) != len(keys):
            duplicates = [key for key, count in Counter(keys).items() if count > 1]
            raise ValueError(f"duplicate ids in one batch: {duplicates[:10]}; ids must be unique")
        return keys

    def locate(self, ids: list[Hashable]) -> tuple[np.ndarray, torch.Tensor]:
        if len(ids) > self.capacity:
            raise ValueError(
                f"a batch of {len(ids)} ids does not fit a LossCache of capacity {self.capacity}: "
                "the capacity must be at least the loader's batch size"
            )
        measured = np.array([self.slots[key][1] if key in self.slots else -1 for key in ids], dtype=np.int64)
        return measured, upload(self._slots_for(ids), self.device)

    def claim(self, ids: list[Hashable], positions: np.ndarray) -> list[Hashable]:
        scored = [ids[position] for position in positions.tolist()]
        for key in scored:
            self.slots[key][1] = -1  # unknown until scored (the slot may have been reused by eviction)
        return scored

    def stamp(self, ids: list[Hashable], now: int) -> None:
        for key in ids:
            self.slots[key][1] = now

    def observe_device(self, ids: torch.Tensor, losses: torch.Tensor, now: int, restamp: bool) -> None:
        self.in_flight.add(Observation(ids, now, losses.clone(), restamp, None))

    def observe_host(self, ids: list[Hashable], losses: torch.Tensor, now: int, restamp: bool) -> None:
        if len(ids) > self.capacity:
            raise ValueError(f"{len(ids)} observed ids do not fit a LossCache of capacity {self.capacity}")
        slots = self._slots_for(ids)
        # A loss that landed late may be older than a scoring since: that one stays (value and time), else a value
        # older than its recorded time would be used.
        measured = [self.slots[key][1] for key in ids]
        newer = [i for i, time in enumerate(measured) if time <= now]  # never measured (-1) included
        if len(newer) < len(ids):
            losses, slots = losses.index_select(0, upload(newer, self.device)), [slots[i] for i in newer]
        self.loss.index_copy_(0, upload(slots, self.device), losses)
        # restamp: the observed samples count as measured now; else only those never measured are stamped
        self.stamp([ids[i] for i in newer if restamp or measured[i] < 0], now)

    def _slots_for(self, ids: list[Hashable]) -> list[int]:
        """The slots of ``ids`` (at most ``capacity``), making room for new ones by evicting the least recently seen
        entries of other keys: the batch's known keys are marked seen first, so none of them is evicted."""
        for key in ids:
            if key in self.slots:
                self.slots.move_to_end(key)
        return [self._slot(key) for key in ids]

    def _slot(self, key: Hashable) -> int:
        """The slot of ``key``, making room by evicting the least recently seen entry."""
        if key in self.slots:
            self.slots.move_to_end(key)
            return self.slots[key][0]
        if len(self.slots) < self.capacity:
            slot = len(self.slots)
        else:
            _, (slot, _) = self.slots.popitem(last=False)
        self.slots[key] = [slot, -1]
        return slot

    def known(self) -> int:
        return len(self.slots)

    def has(self, key: Any) -> bool:
        return key in self.slots and self.slots[key][1] >= 0

    def memory_bytes(self) -> int:
        return self.loss.numel() * self.loss.element_size() + len(self.slots) * self.ENTRY_BYTES

    def state_dict(self) -> dict[str, Any]:
        return {"slots": [(key, slot, when) for key, (slot, when) in self.slots.items()]}

    def _load_times(self, state: dict[str, Any]) -> None:
        self.slots = OrderedDict((key, [int(slot), int(when)]) for key, slot, when in state["slots"])
