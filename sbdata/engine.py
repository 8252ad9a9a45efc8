"""The selection engine: the one place where batches are scored, selected, pooled and emitted.

Front ends (:class:`~sbdata.SBLoader`, :class:`~sbdata.SBCollator`, ``sbdata.nodes.SBSelector``,
``sbdata.wds.sb_select``) only feed it loader batches and hand on what it emits; see ``docs/design.md``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from . import _batch
from .cache import LossCache
from .distributed import in_job, joined_late, make_lockstep, scoring_module
from .pool import Pool
from .schedule import Schedule
from .scoring import Scorer
from .selector import Selector
from .stats import SBStats, StatsTracker

__all__ = ["SelectionEngine"]


def _model_device(model: nn.Module) -> torch.device:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


class SelectionEngine:
    """Scores loader batches with the live model and emits the selected samples.

    Per loader batch (see ``docs/design.md``): count the step and ask the schedule; move tensor fields to the
    scoring device; on a plain step emit the whole batch; on an SB step split it, score it with no side effects,
    let the policy choose, take the same samples from every field, and emit the subset, or, with ``batch_size``,
    add it to a pool that emits batches of exactly ``batch_size``.

    Args:
        model: the live ``nn.Module`` being trained (scored in place, never copied).
        loss_fn: per-sample loss, called as ``loss_fn(outputs, targets, reduction='none')``, or a loss module.
        keep: share of each SB batch to keep, in (0, 1]. Default 0.5. For ``"history"`` it sets
            ``beta = 1/keep - 1``.
        policy: ``"topk"``, ``"rank"``, ``"random"``, ``"history"`` or a :class:`SelectionPolicy`. Default ``"topk"``.
        schedule: a :class:`Schedule`; None selects on every batch. Default None.
        scale_factor: downsampling of the inputs for scoring only, in (0, 1]. Default 1.
        device: scoring device; None uses the model's. Tensor fields are moved there. Default None.
        score_mode: ``"eval"`` or ``"train"`` (batch statistics, buffers restored). Default ``"eval"``.
        autocast_dtype: dtype for ``torch.autocast`` around the scoring pass; None disables. Default None.
        split: ``split(batch) -> (inputs, targets)``; default takes a 2-sequence or ``input``/``target`` keys.
        forward: ``forward(model, inputs) -> outputs``; default ``model(inputs)``.
        reduce: ``reduce(losses, targets) -> (B,)`` for losses with extra dims; default mean over them.
        generator: ``torch.Generator`` on the scoring device, or an int seed; None seeds 0 (under
            ``torch.distributed``, the rank, so that ranks draw independently). Default None.
        nan_policy: for non-finite losses, ``"raise"`` (naming the loader batch and positions; no sync: the flag is
            read once it reaches the host, on CUDA normally at the next SB step, at the latest at the epoch's end
            or in ``state_dict``), ``"drop"`` (never keep them; one sync) or ``"keep"`` (treat them as the hardest;
            no sync).
            Default ``"raise"``.
        batch_size: emit SB batches of exactly this many samples through a pool; None emits each subset as it
            is. Default None.
        drop_last: with ``batch_size``, drop the short last batch of an epoch. Default False.
        return_weights: emit ``(batch, weights)`` where ``(weights * per_sample_loss).sum()`` estimates the
            candidates' mean loss without bias; not available with ``"topk"``. Default False.
        id_key: where a batch keeps per-sample ids (a mapping key, a tuple position or ``callable(batch)``),
            needed by id-keyed policies and the cache. Default None.
        cache: a :class:`~sbdata.LossCache`: samples whose cached loss is fresh skip the scoring forward; needs
            ``id_key``. Default None.
        sync: under ``torch.distributed``, ``"local"`` (each rank ranks its own batch) or ``"global"`` (ranks'
            policies see every rank's candidate scores; each still keeps its own share). Default ``"local"``.
            See ``docs/distributed.md``.
        process_group: the ranks that train together; None is the default group. With an initialised group of
            more than one rank, the engine runs in lockstep with them. Default None.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: Any,
        *,
        keep: float | None = None,
        policy: Any = "topk",
        schedule: Schedule | None = None,
        scale_factor: float = 1.0,
        device: torch.device | str | None = None,
        score_mode: str = "eval",
        autocast_dtype: torch.dtype | None = None,
        split: Callable[[Any], tuple[Any, Any]] | None = None,
        forward: Callable[[nn.Module, Any], Any] | None = None,
        reduce: Callable[[torch.Tensor, Any], torch.Tensor] | None = None,
        generator: torch.Generator | int | None = None,
        nan_policy: str = "raise",
        batch_size: int | None = None,
        drop_last: bool = False,
        return_weights: bool = False,
        id_key: str | int | Callable[[Any], Any] | None = None,
        cache: LossCache | None = None,
        sync: str = "local",
        process_group: Any = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be the torch.nn.Module being trained, got {type(model).__name__}")
        keep_given = keep is not None
        keep = 0.5 if keep is None else keep
        if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 < keep <= 1:
            raise ValueError(f"keep must be in (0, 1] (the share of each batch to train on), got {keep!r}")
        if schedule is not None and not callable(getattr(schedule, "is_active", None)):
            raise TypeError(f"schedule must be a sbdata.Schedule or None, got {type(schedule).__name__}")
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ValueError(f"batch_size must be an int >= 1 (samples per output batch) or None, got {batch_size!r}")
        if drop_last and batch_size is None:
            raise ValueError("drop_last=True applies to the pooled path only: pass batch_size= as well, or drop it")
        self.model = model
        self.schedule = schedule if schedule is not None else Schedule()
        self.device = torch.device(device) if device is not None else _model_device(model)
        self._lockstep = make_lockstep(sync, process_group, self.device)
        self._built_in_job = in_job()
        self.tracker = StatsTracker()
        scorer = Scorer(
            loss_fn,
            forward=forward,
            reduce=reduce,
            score_mode=score_mode,
            scale_factor=scale_factor,
            autocast_dtype=autocast_dtype,
        )
        self.selector = Selector(
            scoring_module(model),
            scorer,
            keep=float(keep),
            keep_given=keep_given,
            policy=policy,
            device=self.device,
            generator=generator,
            split=split,
            nan_policy=nan_policy,
            return_weights=return_weights,
            id_key=id_key,
            cache=cache,
            sync=sync,
            tracker=self.tracker,
            lockstep=self._lockstep,
        )
        self.policy = self.selector.policy
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.return_weights = self.selector.return_weights
        first = next(model.parameters(), None)
        self._anchored = first is not None and first.device == self.device  # guard only what was true at the start
        self._device_checked = False
        self.pool = Pool(batch_size) if batch_size is not None else None
        self._ready: deque[Any] = deque()
        self._step = 0
        self._epoch_step = 0
        self._epochs_begun = 0
        self._exhausted = False

    # ----------------------------------------------------------------- driving
    @property
    def step(self) -> int:
        """Loader batches consumed over all epochs (the schedule's clock)."""
        return self._step

    @property
    def epoch_step(self) -> int:
        """Loader batches consumed in the current epoch."""
        return self._epoch_step

    @property
    def epoch(self) -> int:
        """Index of the current epoch, from 0 (epochs are counted by :meth:`begin_epoch`)."""
        return max(0, self._epochs_begun - 1)

    @property
    def mid_epoch(self) -> bool:
        """Whether the current epoch can still yield: its source has not run out, or batches are still held.

        After :meth:`load_state_dict`, front ends continue the saved epoch when this is true and start a new one
        otherwise.
        """
        return not self._exhausted or bool(self._ready) or (self.pool is not None and len(self.pool) > 0)

    @property
    def stats(self) -> SBStats:
        return self.tracker.snapshot()

    @property
    def pending(self) -> int:
        """Samples held between loader batches: in the pool and in emitted batches not yet handed on."""
        held = sum(_batch.batch_size(self._unwrap(out)) or 0 for out in self._ready)
        return held + (len(self.pool) if self.pool is not None else 0)

    def _check_device(self) -> None:
        anchor = next(self.model.parameters(), None)
        if anchor is not None and self._anchored and anchor.device != self.device:
            raise RuntimeError(
                f"the model moved to {anchor.device} after the engine was built for {self.device}: build the "
                "loader after model.to(device), or pass device="
            )
        self._device_checked = True

    def begin_epoch(self) -> None:
        """Start a fresh epoch: reset the in-epoch batch index and drop anything left from an abandoned epoch."""
        self._device_checked = False
        self._epochs_begun += 1
        self._epoch_step = 0
        self._exhausted = False
        self._ready.clear()
        if self.pool is not None:
            self.pool.clear()
        if self._lockstep is not None:
            self._lockstep.begin_epoch()
        elif not self._built_in_job and joined_late():
            raise RuntimeError(
                "torch.distributed was initialised after this loader was built, so its ranks would not run in "
                "lockstep and could hang: build the loader after init_process_group()"
            )

    def reopen(self) -> None:
        """Let the next :meth:`next_output` ask its source again although the current epoch's source ran out
        (for a front end whose restored source must see its own end once more)."""
        self._exhausted = False

    def next_output(self, source: Iterator[Any]) -> Any:
        """The next batch to train on, pulling loader batches from ``source`` as needed.

        Raises:
            StopIteration: when ``source`` is exhausted and everything held has been emitted; under
                ``torch.distributed``, when that is so on any rank (see :class:`~sbdata.distributed.Lockstep`).
        """
        if self._lockstep is not None:
            return self._lockstep.next_output(self, source)
        while not self._ready:
            if self._exhausted:
                raise StopIteration
            try:
                batch = next(source)
            except StopIteration:
                self._exhausted = True
                self._flush()
                continue
            self.push(batch)
        return self._ready.popleft()

    def iterate(self, source: Iterator[Any]) -> Iterator[Any]:
        """Generator form of :meth:`next_output`, for front ends that are generators."""
        while True:
            try:
                out = self.next_output(source)
            except StopIteration:
                return
            yield out

    def process(self, batch: Any) -> Any:
        """Consume one loader batch and return the one batch it yields (the unpooled path, e.g. a collate_fn).

        Unlike :meth:`next_output`, a batch from which nothing was kept comes back empty rather than skipped.
        """
        if self.pool is not None:
            raise ValueError("process() yields one batch per loader batch; it cannot serve the pooled batch_size= path")
        self.push(batch, emit_empty=True)
        return self._ready.popleft()

    # ----------------------------------------------------------------- one batch
    def push(self, batch: Any, emit_empty: bool = False, active: bool | None = None) -> None:
        """Consume one loader batch; whatever it completes is queued for :meth:`next_output`.

        In the unpooled path a batch from which nothing was kept emits nothing, unless ``emit_empty``. ``active``
        overrides the schedule's decision (the lockstep passes the one all ranks agreed on); None asks it.
        """
        if not self._device_checked:  # once per epoch: the check walks the model's parameters
            self._check_device()
        n = _batch.batch_size(batch)
        if n is None:
            raise ValueError(f"batch of type {type(batch).__name__} has no field with a batch dimension")
        if active is None:
            active = self.schedule.is_active(self._step, self._epoch_step)
        self._step += 1
        self._epoch_step += 1
        self.tracker.steps += 1
        self.tracker.samples_seen += n
        ids = self.selector.ids(batch) if active and n else None  # read before the move: host ids cost no sync
        batch = _batch.to_device(batch, self.device)
        if not active or n == 0:
            self._emit(batch, n, None if n == 0 else torch.full((n,), 1.0 / n, device=self.device))
            return
        started = time.perf_counter()
        subset, kept, ratio, candidates, expected = self.selector(batch, n, ids, self._now(), self._step - 1)
        self.tracker.scoring_seconds += time.perf_counter() - started
        if self.pool is None:
            if kept or emit_empty:
                weights = None if ratio is None else ratio / (expected * candidates)
                self._emit(subset, kept, weights)
            return
        self.pool.add((subset, ratio), kept)
        while (full := self.pool.pop_full()) is not None:
            self._emit(full[0], self.batch_size, None if full[1] is None else full[1] / self.batch_size)

    def _now(self) -> int:
        """The cache's clock: the epoch, or the loader batch for ``LossCache(unit="step")``."""
        cache = self.selector.cache
        return self.epoch if cache is not None and cache.unit == "epoch" else self._step

    def observe(self, batch: Any, losses: torch.Tensor) -> None:
        """Record per-sample losses the training step computed for a yielded ``batch`` into the cache.

        ``losses`` is ``(B,)`` (e.g. ``F.cross_entropy(model(x), y, reduction="none")``); it is detached and kept on
        the device, so nothing synchronises. Samples so observed need no rescoring while fresh.
        """
        self.selector.observe(batch, losses, self._now())

    def _emit(self, batch: Any, size: int, weights: torch.Tensor | None) -> None:
        self.tracker.samples_yielded += size
        self._ready.append((batch, weights) if self.return_weights else batch)

    def _unwrap(self, out: Any) -> Any:
        return out[0] if self.return_weights else out

    def _flush(self) -> None:
        self.selector.settle()  # the epoch's end: report a non-finite loss whose flag is still in flight
        if self.pool is None:
            return
        rest = self.pool.pop_rest()
        if rest is None:
            return
        if self.drop_last:
            return
        subset, ratio = rest
        self._emit(subset, _batch.batch_size(subset) or 0, None if ratio is None else ratio / self.batch_size)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: clock, generator, policy, pool, queued outputs and stats."""
        return {
            "step": self._step,
            "epoch_step": self._epoch_step,
            "epochs_begun": self._epochs_begun,
            "exhausted": self._exhausted,
            **self.selector.state_dict(),
            "pool": None if self.pool is None else self.pool.state_dict(),
            "ready": list(self._ready),
            "stats": self.tracker.state_dict(),
            "lockstep": None if self._lockstep is None else self._lockstep.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state["pool"] is None) != (self.pool is None):
            raise ValueError("state was saved with a different batch_size setting (pooled vs unpooled)")
        self._step = int(state["step"])
        self._epoch_step = int(state["epoch_step"])
        self._epochs_begun = int(state["epochs_begun"])
        self._exhausted = bool(state["exhausted"])
        self._device_checked = False
        self.selector.load_state_dict(state)
        if self.pool is not None:
            self.pool.load_state_dict(state["pool"])
        self._ready = deque(state["ready"])
        self.tracker.load_state_dict(state["stats"])
        if self._lockstep is not None and state.get("lockstep") is not None:
            self._lockstep.load_state_dict(state["lockstep"])
