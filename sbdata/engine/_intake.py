"""One loader batch into the engine: the schedule's decision, the device move, the SB step, the output, the count."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

import sbdata.batch as _batch
from sbdata.auto import AutoController, FixedKeep
from sbdata.engine._emitter import Emitter
from sbdata.engine._passes import Passes
from sbdata.engine._sb_step import SBStep
from sbdata.engine._schedule import Schedule
from sbdata.engine._stats import StatsTracker


class Intake:
    """Processes one loader batch for a :class:`~sbdata.SelectionEngine` (its ``push``); see ``docs/design.md``.

    Args:
        model: the live model (watched only: if it leaves ``device`` after the engine was built there, the next
            epoch's first batch raises, naming the fix).
        device: the scoring device.
        schedule: decides SB step or plain step from the step counts.
        sb_step: the SB step.
        emitter: where plain batches and kept subsets go.
        tracker: the statistics (steps, samples seen, scoring seconds).
        passes: the engine's passes (steps and epochs), counted here once a batch has been processed.
        controller: the route of ``keep=``: each batch the schedule selects on is selected at the share it returns
            or yielded whole (``keep="auto"``: in a trial it may measure the batch first).
    """

    def __init__(
        self,
        model: nn.Module,
        device: torch.device,
        schedule: Schedule,
        sb_step: SBStep,
        emitter: Emitter,
        tracker: StatsTracker,
        passes: Passes,
        controller: AutoController | FixedKeep,
    ) -> None:
        self.model = model
        self.device = device
        self.schedule = schedule
        self.sb_step = sb_step
        self.emitter = emitter
        self.tracker = tracker
        self.passes = passes
        self.controller = controller
        first = next(model.parameters(), None)
        self.anchored = first is not None and first.device == device  # guard only what was true at the start
        self._device_checked = False  # checked once per epoch: the check walks the model's parameters

    def check_device(self) -> None:
        """Raise if the model moved away from the scoring device it was on when the engine was built."""
        anchor = next(self.model.parameters(), None)
        if anchor is not None and self.anchored and anchor.device != self.device:
            raise RuntimeError(
                f"the model moved to {anchor.device} after the engine was built for {self.device}: build the "
                "loader after model.to(device), or pass device="
            )
        self._device_checked = True

    def recheck_device(self) -> None:
        """Check the model's device again at the next loader batch (a new epoch, a loaded state)."""
        self._device_checked = False

    def cache_time(self, step: int | None = None) -> int:
        """The cache's time: the epoch, or the loader batch (``step``, default the current one) for
        ``LossCache(unit="step")``."""
        if self.sb_step.cache_unit == "epoch":
            return self.passes.epoch
        return self.passes.step if step is None else step

    def push(self, batch: Any, emit_empty: bool = False, active: bool | None = None) -> None:
        """Consume one loader batch; see :meth:`~sbdata.SelectionEngine.push`."""
        if not self._device_checked:
            self.check_device()
        n = _batch.sample_count(batch)  # the common (x, y) batch takes _pairs' fast path inside
        if n is None:
            raise ValueError(f"batch of type {type(batch).__name__} has no field with a batch dimension")
        passes, sb_step = self.passes, self.sb_step
        if active is None:
            active = self.schedule.is_active(passes.step, passes.epoch_step)
        controller, routed, keep, measure = self.controller, active and n > 0, None, False
        if routed:
            active, keep, measure = controller.route(passes.step, n)  # a counter check; a decision once per trial
        moved = None
        if measure:
            moved = _batch.to_device(batch, self.device)
            self._measure(moved, n)  # before it is trained on
        if not active or n == 0:
            batch = _batch.to_device(batch, self.device) if moved is None else moved
            self.emitter.add_plain(batch, n)
            self._count(n)
            if routed:
                controller.count(False, n)
            return
        ids = sb_step.ids(batch) if sb_step.reads_ids else None  # read before the move: host ids cost no sync
        batch = _batch.to_device(batch, self.device) if moved is None else moved
        tracker = self.tracker
        saved = tracker.counters()
        started = time.perf_counter()
        step = passes.step
        now = step + 1 if sb_step.cache_unit is None else self.cache_time(step + 1)
        controller.scoring_started()
        try:
            kept = sb_step(batch, n, ids, now, step, keep)
        except BaseException:
            tracker.restore_counters(saved)
            raise
        controller.scoring_ended(n)
        tracker.scoring_timed(time.perf_counter() - started)
        controller.add(kept.scores)  # device sums: no synchronisation
        self.emitter.add_kept(kept.subset, kept.size, kept.ratio, kept.expected, kept.candidates, emit_empty)
        self._count(n)
        if routed:
            controller.count(True, n)

    def _measure(self, batch: Any, n: int) -> None:
        """Measure the trial's averaged model on a batch before it is trained on (``keep="auto"``)."""
        split, quality = self.sb_step.quality_pass(self.passes.step)
        self.tracker.scored(self.controller.measure(split, quality, batch, n))

    def end_source(self) -> None:
        """The epoch's source ran out: report a non-finite loss whose flag is still in flight, send the cache's observed
        ids on their way, then queue the pool's short rest (unless ``drop_last``)."""
        self.sb_step.settle()
        self.sb_step.settle_cache()  # observed ids still on the device start for the host: nothing waits
        self.emitter.end_source()

    def fill(self, source: Iterator[Any]) -> bool:
        """Push loader batches from ``source`` until an output is ready (the process's own driver loop).

        A batch whose processing raises stays pending, uncounted, and is pushed first next time. When the source
        runs out, :meth:`end_source` queues the pool's rest.

        Returns:
            Whether an output is ready; False once the source has ended and everything held was handed on.
        """
        passes, emitter = self.passes, self.emitter
        while not emitter.ready:
            if emitter.source_ended:
                return False
            try:
                batch = passes.take(source)
            except StopIteration:
                self.end_source()
                continue
            self.push(batch)  # if this raises, the batch stays held and uncounted
            passes.release()
        return True

    def _count(self, n: int) -> None:
        self.passes.count()
        self.tracker.batch_processed(n)
