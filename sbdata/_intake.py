"""One loader batch into the engine: the schedule's decision, the device move, the SB step, the output, the count."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from . import _batch
from ._clock import PassClock
from ._controller import AutoController
from ._output import Output
from ._step import SBStep
from .schedule import Schedule
from .scoring import dropout_seed
from .stats import StatsTracker

__all__ = ["Intake", "model_device"]


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer; the CPU for a model without either."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


class Intake:
    """Processes one loader batch for a :class:`~sbdata.SelectionEngine` (its ``push``); see ``docs/design.md``.

    Args:
        model: the live model (watched only: if it leaves ``device`` after the engine was built there, the next
            epoch's first batch raises, naming the fix).
        device: the scoring device.
        schedule: decides SB step or plain step from the clock.
        sb_step: the SB step.
        output: where plain batches and kept subsets go.
        tracker: the statistics (steps, samples seen, scoring seconds).
        clock: the engine's clock, counted here once a batch has been processed.
        auto: the ``keep="auto"`` controller, or None: it routes each batch the schedule selects on (select, or
            yield it whole, probe-scoring some).
    """

    def __init__(
        self,
        model: nn.Module,
        device: torch.device,
        schedule: Schedule,
        sb_step: SBStep,
        output: Output,
        tracker: StatsTracker,
        clock: PassClock,
        auto: AutoController | None = None,
    ) -> None:
        self.model = model
        self.device = device
        self.schedule = schedule
        self.sb_step = sb_step
        self.output = output
        self.tracker = tracker
        self.clock = clock
        self.auto = auto
        first = next(model.parameters(), None)
        self.anchored = first is not None and first.device == device  # guard only what was true at the start
        self.device_checked = False  # checked once per epoch: the check walks the model's parameters

    def check_device(self) -> None:
        """Raise if the model moved away from the scoring device it was on when the engine was built."""
        anchor = next(self.model.parameters(), None)
        if anchor is not None and self.anchored and anchor.device != self.device:
            raise RuntimeError(
                f"the model moved to {anchor.device} after the engine was built for {self.device}: build the "
                "loader after model.to(device), or pass device="
            )
        self.device_checked = True

    def now(self, step: int | None = None) -> int:
        """The cache's clock: the epoch, or the loader batch (``step``, default the clock's) for
        ``LossCache(unit="step")``."""
        cache = self.sb_step.cache
        if cache is not None and cache.unit == "epoch":
            return self.clock.epoch
        return self.clock.step if step is None else step

    def push(self, batch: Any, emit_empty: bool = False, active: bool | None = None) -> None:
        """Consume one loader batch; see :meth:`~sbdata.SelectionEngine.push`."""
        if not self.device_checked:
            self.check_device()
        n = _batch.batch_size(batch)  # the common (x, y) batch takes _pairs' fast path inside
        if n is None:
            raise ValueError(f"batch of type {type(batch).__name__} has no field with a batch dimension")
        clock, sb_step = self.clock, self.sb_step
        if active is None:
            active = self.schedule.is_active(clock.step, clock.epoch_step)
        auto, routed, probe = self.auto, False, False
        if auto is not None and active and n:
            routed = True
            active, probe = auto.route(clock.step)  # a counter check, and a read once a window is full
        if not active or n == 0:
            batch = _batch.to_device(batch, self.device)
            if probe:
                self._probe(batch, n)
            self.output.add_plain(batch, n)
            self._count(n)
            if routed:
                auto.count(False, probe, n)  # type: ignore[union-attr]
            return
        ids = None if sb_step.id_key is None else sb_step.ids(batch)  # read before the move: host ids cost no sync
        batch = _batch.to_device(batch, self.device)
        tracker = self.tracker
        saved = tracker.counters()
        started = time.perf_counter()
        step = clock.step
        now = step + 1 if sb_step.cache is None else self.now(step + 1)
        meter = None if auto is None else auto.meter
        if meter is not None:
            meter.begin_score()
        try:
            kept = sb_step(batch, n, ids, now, step)
        except BaseException:
            tracker.restore_counters(saved)
            raise
        if meter is not None:
            meter.end_score(n)
        tracker.scoring_seconds += time.perf_counter() - started
        self.output.add_kept(kept.subset, kept.size, kept.ratio, kept.expected, kept.candidates, emit_empty)
        self._count(n)
        if routed:
            auto.count(True, True, n)  # type: ignore[union-attr]

    def _probe(self, batch: Any, n: int) -> None:
        """Score a batch that is yielded whole, for ``keep="auto"``'s estimate (dropout seeded as an SB step's)."""
        sb_step, device = self.sb_step, self.device
        seed = dropout_seed(sb_step.generator.initial_seed(), self.clock.step)

        def score(inputs: Any, targets: Any, size: int) -> torch.Tensor:
            return sb_step.scorer(sb_step.model, inputs, targets, size, device, seed)

        self.tracker.samples_scored += self.auto.probe(sb_step.split, score, batch, n)  # type: ignore[union-attr]

    def end_source(self) -> None:
        """The epoch's source ran out: report a non-finite loss whose flag is still in flight, apply the cache's
        observations in flight, then queue the pool's short rest (unless ``drop_last``)."""
        self.sb_step.settle()
        if self.sb_step.cache is not None:
            self.sb_step.cache.settle()  # observations whose ids are still in flight: one read per epoch
        self.output.end_source()

    def fill(self, source: Iterator[Any]) -> bool:
        """Push loader batches from ``source`` until an output is ready (the process's own driver loop).

        A batch whose processing raises stays pending, uncounted, and is pushed first next time. When the source
        runs out, :meth:`end_source` queues the pool's rest.

        Returns:
            Whether an output is ready; False once the source has ended and everything held was handed on.
        """
        clock, output = self.clock, self.output
        while not output.ready:
            if output.source_ended:
                return False
            if clock.held_batch is None:
                try:
                    clock.held_batch = next(source)
                except StopIteration:
                    self.end_source()
                    continue
            self.push(clock.held_batch)  # if this raises, the batch stays pending and uncounted
            clock.held_batch = None
        return True

    def _count(self, n: int) -> None:
        self.clock.count()
        self.tracker.steps += 1
        self.tracker.samples_seen += n
