"""Stale-loss cache: score a sample only when its last known loss is missing or too old.

:class:`LossCache` decides what is stale and how many samples to score (:func:`bucket_size`); its two layouts
(dense integer ids, keyed ids) are tables in ``_layouts.py``; :func:`with_index` lives in ``_indexed.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from sbdata.batch import KeptColumn, upload
from sbdata.cache._layouts import DenseTable, KeyedTable, LossTable

__all__ = ["LossCache"]

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
    (the yielded batch's id tensor, or a :class:`~sbdata.KeptColumn` of keys) reach the host in non-blocking copies
    of 64 observations, and the rest at the end of each epoch, each applied once it has landed (``_inflight.py``);
    only ``state_dict`` and asking the cache what it holds wait for them. Dense losses are written on the device at
    once; keyed ones, and the times, once their ids have landed. An observed sample looked up again before that is
    scored rather than reused; a late observation never replaces a loss scored after it. Ids that arrive on the
    device in the loader's batch are read on the host at each lookup (one synchronisation per SB step, which the
    host-side plan needs): keep them on the host, where a ``DataLoader`` yields them.

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

    Choose ``"scored"`` where a scoring call has a large fixed cost next to its per-sample cost (small models on a CPU);
    ``"observed"`` where the per-sample cost dominates (larger models, GPUs); what each costs on the benchmark ConvNet
    is in ``docs/guide/reuse_losses.md``. Either way no value older than ``staleness`` is used: in ``"scored"`` mode an
    observed value is younger than its recorded time. A :class:`~sbdata.PruningSampler` merging the ranks' caches picks
    each sample's entry by its recorded time: in ``"scored"`` mode a rank's observed loss may give way to another rank's
    older one, scored more recently.

    **A warm cache** (:meth:`warm_start`) carries the entries of an earlier run's cache (its ``state_dict``, e.g. from
    that run's checkpoint) into a new run by stable sample ids, so that retraining on data the model mostly knows
    skips the known samples' scoring forwards until their losses are ``staleness`` epochs old in the new run.

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
        self._origin = 0  # the cache's own time at the run's time 0: past a warm start, after the carried entries

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
        positions, stale = self._plan(measured, now + self._origin)
        scored = table.claim(host, positions)
        losses = table.loss.index_select(0, index)
        return CacheLookup(losses, upload(positions, table.device), positions.shape[0], stale, (index, scored))

    def store(self, lookup: CacheLookup, fresh: torch.Tensor, now: int) -> None:
        """Record the losses just scored for ``lookup.positions``."""
        index, scored = lookup.handle
        self._table.loss.index_copy_(0, index.index_select(0, lookup.positions), fresh.to(torch.float32))
        self._table.stamp(scored, now + self._origin)

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
        now = now + self._origin
        if isinstance(ids, KeptColumn) and not ids.resolved:  # kept keys: indices on the device, nothing read now
            self._table.observe_kept(ids, losses, now, restamps)
        elif isinstance(ids, KeptColumn):
            self._table.observe_host(self._table.host_ids(ids.values()), losses, now, restamps)
        elif isinstance(ids, torch.Tensor):
            self._table.observe_device(ids, losses, now, restamps)
        else:
            self._table.observe_host(self._table.host_ids(ids), losses, now, restamps)

    def settle(self, wait: bool = True) -> None:
        """Apply the observations still on their way to the host: start the copy of those not yet sent, then apply
        every one (``wait``: one synchronisation) or those that have landed (never waits; the engine's call at the
        end of each epoch, the rest landing at a later lookup)."""
        self._table.in_flight.ship()
        self._table.land(wait=wait)

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
            "origin": self._origin,
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
        self._largest = int(state["largest"])
        self._origin = int(state["origin"])

    def warm_start(self, state: Mapping[str, Any], *, id_map: torch.Tensor | Sequence[int] | None = None) -> None:
        """Carry an earlier run's cache into this new run (a warm cache; to continue the same run, use
        :meth:`load_state_dict`). Call it before the run's first batch.

        The carried entries keep their losses and their ages: the newest count as measured one ``unit`` before this
        run's start, older ones as much older as they were. So with ``staleness=s`` a sample measured in the earlier
        run's last epoch is reused in this run's first ``s`` epochs and scored again in epoch ``s`` (0-based), as the
        option promises; with ``s=0`` it is scored again at once. This run's ``staleness`` and ``refresh`` apply;
        the carried state may have been saved under others. A :class:`~sbdata.PruningSampler` over this cache reads
        the carried entries as known losses from its first epoch on.

        Args:
            state: a :meth:`state_dict` of the earlier run's cache (``torch.load(..., weights_only=True)``).
            id_map: dense layout only: for each carried id ``i`` (``0 <= i <`` the carried size), this run's id of the
                same sample, or -1 to drop it; needed when the datasets differ (a mix of old and new data). A 1-D
                integer tensor or sequence as long as the carried cache. Default None: ids carry as they are, and
                the sizes must match. Keyed ids (e.g. ``__key__`` strings) always carry as they are.

        Raises:
            ValueError: if the layouts or units differ, if the dense sizes differ without an ``id_map`` (naming
                both sizes), if ``id_map`` is malformed, or if this cache already holds a loss.
        """
        kind = "dense" if self.dense else "keyed"
        carried_kind = str(state["layout"]).split(" ")[0]
        if carried_kind != kind:
            raise ValueError(f"the carried cache is {state['layout']!r} but this one is {self.layout!r}: a warm start "
                             "carries entries between caches of one layout (dense ids or keys)")  # fmt: skip
        if state["unit"] != self.unit:
            raise ValueError(f"the carried cache counts ages in {state['unit']}s but this one in {self.unit}s: build "
                             f"this LossCache with unit={state['unit']!r} to carry its entries")  # fmt: skip
        self._table.land(wait=True)
        if self._table.known():
            raise ValueError("warm_start carries an earlier run's entries into an empty cache: call it before the "
                             "run's first batch (to continue a run, use load_state_dict)")  # fmt: skip
        if self.dense:
            self._origin = self._warm_dense(state, id_map)
        elif id_map is not None:
            raise ValueError("id_map applies to a dense cache (size=N); keyed ids carry as they are")
        else:
            self._origin = self._warm_keyed(state)

    def _warm_dense(self, state: Mapping[str, Any], id_map: torch.Tensor | Sequence[int] | None) -> int:
        assert self.size is not None
        loss, when = state["loss"].float().cpu(), state["when"].cpu().long()
        carried = loss.shape[0]
        if id_map is None:
            if carried != self.size:
                raise ValueError(
                    f"the carried cache has size {carried} but this one has size {self.size}: pass id_map= (for "
                    f"each of the {carried} carried ids, this run's id of the same sample, or -1 to drop it), or "
                    "build the LossCache with the carried size if the dataset is the same"
                )
            mapping = torch.arange(carried)
        else:
            mapping = torch.as_tensor(id_map)
            if mapping.dim() != 1 or mapping.shape[0] != carried or mapping.dtype.is_floating_point:
                raise ValueError(f"id_map must be a 1-D integer sequence of the carried cache's {carried} ids, got "
                                 f"shape {tuple(mapping.shape)} and dtype {mapping.dtype}")  # fmt: skip
            mapping = mapping.long()
            kept = mapping[mapping >= 0]
            if bool((mapping < -1).any()) or bool((kept >= self.size).any()) or kept.unique().numel() != kept.numel():
                raise ValueError(f"id_map must map carried ids to distinct ids in [0, {self.size}) or to -1 (drop)")
        known = (when >= 0) & (mapping >= 0)
        fresh_when = torch.full((self.size,), -1, dtype=torch.long)
        fresh_loss = torch.zeros(self.size, dtype=torch.float32)
        fresh_when[mapping[known]] = when[known]
        fresh_loss[mapping[known]] = loss[known]
        origin = int(when[known].max()) + 1 if bool(known.any()) else 0
        table = self._table
        table.load_state_dict({"loss": fresh_loss, "when": fresh_when.to(torch.int32)})
        return origin

    def _warm_keyed(self, state: Mapping[str, Any]) -> int:
        assert self.capacity is not None
        loss = state["loss"].float().cpu()
        entries = [(key, int(slot), int(when)) for key, slot, when in state["slots"] if int(when) >= 0]
        entries = entries[-self.capacity :]  # the most recently seen, if this cache holds fewer
        fresh_loss = torch.zeros(self.capacity, dtype=torch.float32)
        if entries:
            fresh_loss[: len(entries)] = loss[torch.tensor([slot for _, slot, _ in entries])]
        slots = [(key, slot, when) for slot, (key, _, when) in enumerate(entries)]
        self._table.load_state_dict({"loss": fresh_loss, "slots": slots})
        return max((when for _, _, when in entries), default=-1) + 1

    def record_entries(self, ids: torch.Tensor, losses: torch.Tensor, when: int) -> None:
        """Record entries read by :meth:`dense_entries` (this or another rank's cache), at the time it reported for
        them: in the cache's own time, which a warm start shifts (``PruningSampler`` merges ranks through this)."""
        self.observe(ids, losses, when - self._origin, restamp=True)

    def __repr__(self) -> str:
        layout = f"size={self.size}" if self.dense else f"capacity={self.capacity}"
        return (
            f"LossCache(staleness={self.staleness}, {layout}, unit={self.unit!r}, refresh={self.refresh!r}, "
            f"{self.memory_bytes()} bytes)"
        )

    def dense_entries(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense layout only: copies of every sample's last loss and of when it was measured (-1: never), both
        ``(size,)`` on the cache's device (float32 and int32). One read for epoch-level decisions (pruning).

        The times are in the cache's own time (0 at the first run's start, never negative); record entries read
        here back with :meth:`record_entries`, which takes that time."""
        if not isinstance(self._table, DenseTable):
            raise ValueError("dense_entries needs a dense LossCache (size=N); a keyed one has no index to read by")
        self._table.land(wait=True)  # observations whose ids are still on their way to the host
        loss = self._table.loss
        return loss.clone(), torch.from_numpy(self._table.when.copy()).to(loss.device)
