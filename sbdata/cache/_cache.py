"""Stale-loss cache: score a sample only when its last known loss is missing or too old.

:class:`LossCache` decides what is stale and how many samples to score (:func:`bucket_size`); its two layouts
(dense integer ids, keyed ids) are tables in ``_layouts.py``; :func:`with_index` lives in ``_indexed.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sbdata.batch import KeptColumn, upload
from sbdata.cache._layouts import DenseTable, KeyedTable, LossTable

__all__ = ["BUCKETS", "REFRESH", "UNITS", "CacheLookup", "LossCache", "bucket_size"]

UNITS = ("epoch", "step")
REFRESH = ("observed", "scored")  # what resets a sample's age: any recorded loss, or only a scoring forward's
BUCKETS = 4  # distinct sizes of a stale subset's scoring forward (plus the short last batch's)


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
    score, a bucket of the stalest (:func:`bucket_size`). ``observe`` never waits either: ids that are on the device
    (the yielded batch's id tensor, or a :class:`~sbdata.KeptColumn` of keys) reach the host in groups of 64
    observations, and all of them at the end of each epoch, in ``state_dict`` and when the cache is asked what it
    holds (one synchronisation per epoch; ``_inflight.py``). Dense losses are written on the device at once; keyed
    ones, and the times, once their ids have landed. An observed sample looked up again before that (in the same
    epoch, e.g. with ``unit="step"``) is scored rather than reused; a late observation never replaces a loss scored
    after it.

    A cached loss is fresh while ``now - measured <= staleness``, counted in epochs or in loader batches (``unit``).
    Losses enter the cache when a sample is scored, and through ``observe`` (the losses the training step computed
    anyway). Whether an observed loss also resets the sample's age is ``refresh``:

    - ``"observed"`` (default): it does. The fewest samples scored, but the trained (often the hard) samples' ages
      restart while the others' run on, so their expiries scatter: a few samples per batch fall due in every epoch,
      each batch paying a scoring call.
    - ``"scored"``: it replaces the cached value (selection sees the fresher loss) but the sample keeps the time of
      its last scoring, so the samples scored together fall due together: fewer, fuller scoring calls, more samples
      scored. A sample never measured is stamped by its first observation (the loss is that recent, and otherwise
      the observation would be thrown away by a rescoring).

    Choose ``"scored"`` where a scoring call has a large fixed cost next to its per-sample cost (small models on a
    CPU); ``"observed"`` where the per-sample cost dominates (larger models, GPUs). Measured on the benchmark ConvNet
    (MNIST-1D 20k, CPU, top-k keep 0.25, staleness 2; ``benchmarks/README.md``): against the same cache without
    ``observe``, ``"observed"`` scored 14% fewer samples in 2.4x the calls (744, in 4 sizes) and took 1.051x the
    seconds; ``"scored"`` scored in the same 315 calls and took 1.014x (the ``observe`` call's own cost). Either way
    no value older than ``staleness`` is used: in ``"scored"`` mode an observed value is younger than its recorded
    time. A :class:`~sbdata.PruningSampler` merging the ranks' caches picks each sample's entry by its recorded
    time: in ``"scored"`` mode a rank's observed loss may give way to another rank's older one, scored more recently.

    Args:
        staleness: how old (in ``unit``) a cached loss may be and still be used, >= 0. 0 reuses only losses from the
            same epoch (or step). Default 1.
        size: number of samples for the dense layout. Exclusive with ``capacity``.
        capacity: maximum entries for the keyed layout, >= 1. Exclusive with ``size``.
        unit: ``"epoch"`` or ``"step"``. Default ``"epoch"``.
        refresh: ``"observed"`` or ``"scored"``: whether an observed loss resets the sample's age (above). Default
            ``"observed"``. Part of the state: a state loads only into a cache with the same ``refresh``.
    """

    def __init__(
        self,
        staleness: int = 1,
        *,
        size: int | None = None,
        capacity: int | None = None,
        unit: str = "epoch",
        refresh: str = "observed",
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
        if refresh not in REFRESH:
            raise ValueError(
                f"refresh must be one of {REFRESH} (what resets a sample's age: any recorded loss, or only a "
                f"scoring forward), got {refresh!r}"
            )
        self.staleness = staleness
        self.size = size
        self.capacity = capacity
        self.unit = unit
        self.refresh = refresh
        self._table: LossTable[Any]  # the layout: dense ids or keys (_layouts.py)
        if size is not None:
            self._table = DenseTable(size)
        elif capacity is not None:
            self._table = KeyedTable(capacity)
        self._largest = 0  # the largest batch looked up: the bucket grid

    @property
    def dense(self) -> bool:
        return self.size is not None

    def bind(self, device: torch.device) -> None:
        """Move the cache's losses to the scoring device (the engine calls this once)."""
        self._table.bind(device)

    def __len__(self) -> int:
        """Samples with a known loss."""
        self._table.land(wait=True)
        return self._table.known()

    def __contains__(self, key: Any) -> bool:
        """Whether a loss is known for ``key`` (an integer id for the dense layout, a key for the keyed one)."""
        self._table.land(wait=True)
        return self._table.has(key)

    def memory_bytes(self) -> int:
        """Bytes held: the loss tensor and the times, plus an estimate of the keyed layout's host dictionary."""
        return self._table.memory_bytes()

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
        table = self._table
        table.land(wait=False)
        host = table.host_ids(ids)
        measured, index = table.locate(host)
        positions, stale = self._plan(measured, now)
        scored = table.claim(host, positions)
        losses = table.loss.index_select(0, index)
        return CacheLookup(losses, upload(positions, table.device), positions.shape[0], stale, (index, scored))

    def store(self, lookup: CacheLookup, fresh: torch.Tensor, now: int) -> None:
        """Record the losses just scored for ``lookup.positions``."""
        index, scored = lookup.handle
        self._table.loss.index_copy_(0, index.index_select(0, lookup.positions), fresh.to(torch.float32))
        self._table.stamp(scored, now)

    def observe(self, ids: Any, losses: torch.Tensor, now: int, *, restamp: bool | None = None) -> None:
        """Record per-sample losses computed elsewhere (e.g. by the training step), detached, with no sync.

        Tensor ids (the yielded batch's, on the device) reach the host's bookkeeping asynchronously; they are
        checked when they land. Host ids (lists, arrays) are checked and recorded at once.

        Args:
            ids: the samples' ids (as for :meth:`lookup`, or a tensor of them).
            losses: ``(len(ids),)`` per-sample losses measured at ``now``.
            now: when they were measured (in ``unit``).
            restamp: whether the samples count as measured at ``now``. Default None: as ``refresh`` says (True for
                ``"observed"``). True for losses that are an entry's measurement in their own right (another rank's
                cache entries, with their own measure time).
        """
        losses = losses.detach().to(self._table.device, torch.float32)
        restamps = self.refresh == "observed" if restamp is None else restamp
        if isinstance(ids, KeptColumn) and not ids.resolved:  # kept keys: indices on the device, nothing read now
            self._table.observe_kept(ids, losses, now, restamps)
        elif isinstance(ids, KeptColumn):
            self._table.observe_host(self._table.host_ids(ids.values()), losses, now, restamps)
        elif isinstance(ids, torch.Tensor):
            self._table.observe_device(ids, losses, now, restamps)
        else:
            self._table.observe_host(self._table.host_ids(ids), losses, now, restamps)

    def settle(self) -> None:
        """Apply every observation still on its way to the host (one synchronisation; the engine calls this at the
        end of each epoch)."""
        self._table.land(wait=True)

    # ----------------------------------------------------------------- state
    @property
    def layout(self) -> str:
        """``"dense size=N"`` or ``"keyed capacity=C"``."""
        return f"dense size={self.size}" if self.dense else f"keyed capacity={self.capacity}"

    def state_dict(self) -> dict[str, Any]:
        """Losses, times and the configuration they mean something under (layout, ``staleness``, ``unit``,
        ``refresh``), after applying every observation in flight; loads with ``torch.load(..., weights_only=True)``."""
        self._table.land(wait=True)
        return {
            "loss": self._table.loss.clone(),
            "largest": self._largest,
            "layout": self.layout,
            "staleness": self.staleness,
            "unit": self.unit,
            "refresh": self.refresh,
            **self._table.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`.

        Raises:
            ValueError: if the state was saved with another layout, ``staleness``, ``unit`` or ``refresh``, naming
                both values.
        """
        for name in ("layout", "staleness", "unit", "refresh"):
            value, mine = state[name], getattr(self, name)
            if value != mine:
                raise ValueError(
                    f"saved cache has {name}={value!r} but this one has {name}={mine!r}: build the LossCache with "
                    f"{name}={value!r} to resume (a cache's times only mean something under the settings they were "
                    "recorded with)"
                )
        shape = self._table.loss.shape
        if state["loss"].shape != shape:
            raise ValueError(f"saved cache has {state['loss'].shape[0]} entries but this one has {shape[0]}")
        self._table.load_state_dict(state)
        self._largest = int(state.get("largest", 0))

    def __repr__(self) -> str:
        layout = f"size={self.size}" if self.dense else f"capacity={self.capacity}"
        return (
            f"LossCache(staleness={self.staleness}, {layout}, unit={self.unit!r}, refresh={self.refresh!r}, "
            f"{self.memory_bytes()} bytes)"
        )

    def dense_entries(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense layout only: copies of every sample's last loss and of when it was measured (-1: never), both
        ``(size,)`` on the cache's device (float32 and int32). One read for epoch-level decisions (pruning)."""
        if not isinstance(self._table, DenseTable):
            raise ValueError("dense_entries needs a dense LossCache (size=N); a keyed one has no index to read by")
        self._table.land(wait=True)  # observations whose ids are still on their way to the host
        loss = self._table.loss
        return loss.clone(), torch.from_numpy(self._table.when.copy()).to(loss.device)
