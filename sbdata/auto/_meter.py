"""Live cost measurement for ``keep="auto"``: the scoring pass and the user's training step, by batch size.

The scoring pass is timed around the SB step (or a probe): with the controller's clock on the CPU (by default
``time.thread_time``, this thread's CPU seconds), and with CUDA events on CUDA, read only once ``query()`` says
both completed, so timing never waits for the device. The training step is the interval between handing an output
on and the next request for one, attributed to that output's size; that interval also holds whatever else the loop
does between steps (an evaluation, logging, a checkpoint), so every estimate is a **median** of the last
:data:`WINDOW` calls of a size, and a size enters a fit only once it has :data:`MIN_CALLS` calls and at least
:data:`MIN_SHARE` of the calls of the size timed most: an epoch's short last batch, timed once per epoch and often
right beside an evaluation, does not bend the line. Measurements are kept as the call count and the recent seconds
per size (at most :data:`MAX_SIZES` sizes each), plain numbers for the state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from sbdata.auto._gain import CostTable

__all__: list[str] = []  # the engine reaches the meter through AutoController

MAX_SIZES = 16  # distinct batch sizes remembered per kind; more (e.g. many short last batches) are not recorded
WINDOW = 32  # recent calls per size whose median is the estimate
MIN_CALLS = 4  # calls of a size before it enters a fit (once no size has that many, the best-measured one serves)
MIN_SHARE = 0.1  # ... and its share of the calls of the size timed most (rare sizes are the contaminated ones)
MAX_IN_FLIGHT = 64  # CUDA timings not yet completed; older ones are dropped unread


class CostMeter:
    """Seconds per call of the scoring pass and of the training step, by batch size.

    Args:
        device: the scoring device (CUDA: events time the scoring pass).
        clock: seconds as a float; None uses ``time.thread_time`` on the CPU, ``time.perf_counter`` elsewhere.
    """

    def __init__(self, device: torch.device, clock: Callable[[], float] | None) -> None:
        self.device = device
        self.events = device.type == "cuda" and clock is None
        self.clock = clock if clock is not None else (time.thread_time if device.type == "cpu" else time.perf_counter)
        self.score_times: dict[int, list[float]] = {}  # size -> [calls, seconds of the recent calls...]
        self.train_times: dict[int, list[float]] = {}
        self._started: Any = None
        self._in_flight: list[tuple[Any, Any, int]] = []
        self._handed: tuple[float, int] | None = None  # (when, size) of the last output handed on

    def begin_score(self) -> None:
        if self.events:
            self._started = torch.cuda.Event(enable_timing=True)
            self._started.record(torch.cuda.current_stream(self.device))
        else:
            self._started = self.clock()

    def end_score(self, n: int) -> None:
        if self.events:
            end = torch.cuda.Event(enable_timing=True)
            end.record(torch.cuda.current_stream(self.device))
            self._in_flight.append((self._started, end, n))
            del self._in_flight[:-MAX_IN_FLIGHT]
        else:
            _add(self.score_times, n, self.clock() - self._started)

    def handed(self, size: int) -> None:
        """An output of ``size`` samples was handed to the training loop."""
        self._handed = (self.clock(), size)

    def requested(self) -> None:
        """The training loop asks for the next output: the step since the last one handed on is over."""
        if self._handed is not None:
            when, size = self._handed
            self._handed = None
            if size:
                _add(self.train_times, size, self.clock() - when)

    def collect(self) -> None:
        """Add the CUDA timings whose events have completed (``query()``: never waits)."""
        waiting = []
        for start, end, n in self._in_flight:
            if end.query():
                _add(self.score_times, n, start.elapsed_time(end) / 1000.0)
            else:
                waiting.append((start, end, n))
        self._in_flight = waiting

    def table(self) -> CostTable | None:
        """Linear fits of the medians so far; None before both a scoring pass and a training step were timed.

        With training timed at one size only (while off: the loader's batch), ``train(n)`` scales it by the scoring
        fit, ``train(n0) score(n) / score(n0)``: a training step's forward and backward scale with the batch as its
        forward does. The scoring time includes sbdata's selection work, so ``overhead`` is 0.
        """
        self.collect()
        if not self.score_times or not self.train_times:
            return None
        try:
            scored = CostTable.fit(_medians(self.score_times), {1: 1.0})
            train = _medians(self.train_times)
            if len(train) >= 2:
                trained = CostTable.fit({1: 1.0}, train)
                return CostTable(
                    scored.score_per_sample, trained.train_per_sample, scored.score_fixed, trained.train_fixed
                )
            ((size, seconds),) = train.items()
            scale = seconds / scored.score(size) if scored.score(size) > 0 else 0.0
            if scale == 0.0:
                return CostTable(scored.score_per_sample, seconds / size, scored.score_fixed)
            return CostTable(scored.score_per_sample, scale * scored.score_per_sample, scored.score_fixed,
                             scale * scored.score_fixed)  # fmt: skip
        except ValueError:  # a clock that did not move (zero seconds everywhere): nothing to decide from yet
            return None

    def state_dict(self) -> dict[str, Any]:
        self.collect()
        return {"score": _rows(self.score_times), "train": _rows(self.train_times)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.score_times = {int(row[0]): [float(v) for v in row[1:]] for row in state["score"]}
        self.train_times = {int(row[0]): [float(v) for v in row[1:]] for row in state["train"]}
        self._in_flight, self._handed = [], None


class FixedCosts:
    """The meter that measures nothing: the events of :class:`CostMeter` are no-ops and its table is the one given
    (``Auto(costs=...)``; None for a run without trials, which never asks).

    Args:
        costs: the fixed cost table, or None.
    """

    def __init__(self, costs: CostTable | None) -> None:
        self.costs = costs

    def begin_score(self) -> None:
        pass

    def end_score(self, n: int) -> None:
        pass

    def handed(self, size: int) -> None:
        pass

    def requested(self) -> None:
        pass

    def table(self) -> CostTable | None:
        return self.costs

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state: Any) -> None:
        pass


def _add(table: dict[int, list[float]], n: int, seconds: float) -> None:
    """Count one call of size ``n`` and keep its seconds among the last :data:`WINDOW` (entry: calls, seconds...)."""
    entry = table.get(n)
    if entry is None:
        if len(table) >= MAX_SIZES:
            return
        entry = table[n] = [0.0]
    entry[0] += 1
    entry.append(max(0.0, seconds))
    del entry[1 : max(1, len(entry) - WINDOW)]


def _medians(table: dict[int, list[float]]) -> dict[int, float]:
    """The median seconds of each size with :data:`MIN_CALLS` calls or more and :data:`MIN_SHARE` of the calls of
    the size timed most; of that size alone when no other qualifies."""
    most = max(entry[0] for entry in table.values())
    sized = {n: entry[1:] for n, entry in table.items() if entry[0] >= max(MIN_CALLS, MIN_SHARE * most)}
    if not sized:
        n = max(table, key=lambda size: (table[size][0], size))
        sized = {n: table[n][1:]}
    return {n: sorted(values)[len(values) // 2] for n, values in sized.items()}


def _rows(table: dict[int, list[float]]) -> list[list[float]]:
    return [[n, *values] for n, values in sorted(table.items())]
