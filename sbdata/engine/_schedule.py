"""When selection is on: the training-fraction window and the interrupt batches."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["Schedule", "should_selective_backprop"]


def should_selective_backprop(
    current_duration: float,
    batch_idx: int,
    start: float = 0.5,
    end: float = 0.9,
    interrupt: int = 2,
) -> bool:
    """Composer-compatible decision: is this batch a Selective Backprop batch?

    True when ``start <= current_duration < end`` and the batch is not an interrupt batch. With ``interrupt=k > 0``
    every k-th batch of the epoch is plain, i.e. the batches with ``(batch_idx + 1) % k == 0``; ``interrupt=0``
    never interrupts and ``interrupt=1`` interrupts every batch. See :class:`Schedule` for the truth table.

    Args:
        current_duration: elapsed fraction of training, in [0, 1].
        batch_idx: index of the batch within the epoch, from 0.
        start: first fraction (inclusive) at which selection runs. Default 0.5.
        end: fraction (exclusive) at which selection stops. Default 0.9.
        interrupt: every ``interrupt``-th batch is plain; 0 disables interrupts. Default 2.

    Returns:
        Whether to select on this batch.
    """
    in_window = start <= current_duration < end
    not_interrupted = interrupt == 0 or (batch_idx + 1) % interrupt != 0
    return in_window and not_interrupted


class Schedule:
    """Decides, per loader batch, whether selection runs (an *SB step*) or the batch passes whole (a *plain step*).

    Selection runs when ``start <= fraction < end`` and the batch is not an interrupt batch. ``fraction`` is
    ``step / total_steps``, where ``step`` counts the loader batches consumed before this one over all epochs
    (the front end counts them; it is part of their ``state_dict``), or ``progress()`` when a callable is given
    (for trainers that know their progress better, e.g. in tokens). ``batch_idx`` counts loader batches within the
    current epoch from 0, as Composer's ``batch_in_epoch`` does.

    Interrupt truth table (S = selection, . = plain; the window is open)::

        batch_idx      0  1  2  3  4  5
        interrupt=0    S  S  S  S  S  S
        interrupt=1    .  .  .  .  .  .
        interrupt=2    S  .  S  .  S  .
        interrupt=3    S  S  .  S  S  .

    Window edges with ``start=0.5, end=0.9``: fraction 0.49 plain, 0.5 S, 0.89 S, 0.9 plain.

    Without a length of training (neither ``total_steps`` nor ``progress``) there is no window: ``Schedule()`` is
    always on, and ``Schedule(interrupt=2)`` selects on every other batch. Passing ``start`` or ``end`` without one
    is an error, since the window could never be evaluated.

    Args:
        start: first training fraction, inclusive, in [0, 1]. Default 0.5 when a length is given.
        end: training fraction at which selection stops, exclusive, in [start, 1]. Default 0.9 when a length is
            given.
        interrupt: every ``interrupt``-th batch of an epoch is plain; 0 never interrupts. Default 2 when a length
            is given, 0 otherwise.
        total_steps: loader batches in the whole run, e.g. ``epochs * len(loader)``; >= 1.
        progress: zero-argument callable returning the training fraction in [0, 1]; excludes ``total_steps``.
    """

    __slots__ = ("end", "interrupt", "progress", "start", "total_steps")

    def __init__(
        self,
        start: float | None = None,
        end: float | None = None,
        interrupt: int | None = None,
        total_steps: int | None = None,
        progress: Callable[[], float] | None = None,
    ) -> None:
        if total_steps is not None and progress is not None:
            raise ValueError("Schedule takes total_steps or progress, not both: drop one of them")
        if total_steps is not None and (isinstance(total_steps, bool) or not isinstance(total_steps, int)):
            raise TypeError(f"total_steps must be an int, got {total_steps!r}: pass epochs * len(loader)")
        if total_steps is not None and total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}: pass epochs * len(loader)")
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be a zero-argument callable returning a fraction, got {progress!r}")
        measured = total_steps is not None or progress is not None
        if not measured and (start is not None or end is not None):
            raise ValueError(
                f"Schedule(start={start}, end={end}) needs the length of training to place the window: pass "
                "total_steps=epochs * len(loader) or progress=callable"
            )
        self.start = 0.5 if start is None else float(start)
        self.end = 0.9 if end is None else float(end)
        if not 0.0 <= self.start <= 1.0 or not 0.0 <= self.end <= 1.0 or self.start > self.end:
            raise ValueError(f"need 0 <= start <= end <= 1, got start={self.start}, end={self.end}")
        default_interrupt = 2 if measured else 0
        self.interrupt = default_interrupt if interrupt is None else interrupt
        if isinstance(self.interrupt, bool) or not isinstance(self.interrupt, int) or self.interrupt < 0:
            raise ValueError(f"interrupt must be an int >= 0 (0 = never interrupt), got {interrupt!r}")
        self.total_steps = total_steps
        self.progress = progress

    def fraction(self, step: int) -> float | None:
        """Training fraction at loader batch ``step`` (0-based, over all epochs); None without a length of
        training."""
        if self.progress is not None:
            value = float(self.progress())
            if not math.isfinite(value):
                raise ValueError(f"progress() returned {value}; it must return the training fraction in [0, 1]")
            return value
        if self.total_steps is not None:
            return step / self.total_steps
        return None

    def is_active(self, step: int, batch_idx: int) -> bool:
        """Whether loader batch ``step`` (``batch_idx`` within its epoch) is an SB step."""
        if self.interrupt == 0 and self.total_steps is None and self.progress is None:
            return True  # Schedule(): always on (asked once per loader batch, so answered without the calls below)
        fraction = self.fraction(step)
        if fraction is None:
            return should_selective_backprop(0.0, batch_idx, start=0.0, end=math.inf, interrupt=self.interrupt)
        return should_selective_backprop(fraction, batch_idx, self.start, self.end, self.interrupt)

    @property
    def narrows(self) -> bool:
        """Whether it selects on only some loader batches: interrupt batches, or a window short of the whole run."""
        measured = self.total_steps is not None or self.progress is not None
        return bool(self.interrupt) or (measured and (self.start > 0 or self.end < 1))

    def __repr__(self) -> str:
        length = f"total_steps={self.total_steps}" if self.progress is None else f"progress={self.progress!r}"
        if self.total_steps is None and self.progress is None:
            return f"Schedule(interrupt={self.interrupt})"
        return f"Schedule(start={self.start}, end={self.end}, interrupt={self.interrupt}, {length})"
