"""What a trainer knows of its run, handed to selection when the trainer builds the loader: its progress (a
Schedule driven by it) and its planned length in loader batches (which bounds ``keep="auto"``'s trials)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from sbdata.engine import Schedule

__all__ = ["TrainerProgress", "bind_progress", "planned_batches", "trainer_schedule"]


class TrainerProgress:
    """The training fraction in [0, 1] as the trainer counts it (optimizer steps done / total); unbound until the
    integration that builds the loader attaches it to its trainer."""

    def __init__(self) -> None:
        self.read: Callable[[], float] | None = None

    def bind(self, read: Callable[[], float]) -> None:
        """Clock this progress by ``read() -> fraction`` (the integration that builds the loader calls this)."""
        self.read = read

    def __call__(self) -> float:
        if self.read is None:
            raise RuntimeError(
                "trainer_schedule() is clocked by a trainer, but no sbdata integration has bound it yet: pass it in "
                "the options of SBDataModule / sb_train_dataloader / SBTrainer, or use Schedule(total_steps=...)"
            )
        return min(1.0, max(0.0, float(self.read())))


def trainer_schedule(start: float = 0.5, end: float = 0.9, interrupt: int = 2) -> Schedule:
    """A :class:`~sbdata.Schedule` whose fraction is the trainer's progress (optimizer steps over the total it
    plans), so its window holds under gradient accumulation, ``max_steps``, several devices and resumption.

    Args:
        start: first training fraction with selection, inclusive, in [0, 1]. Default 0.5.
        end: fraction at which selection stops, exclusive, in [start, 1]. Default 0.9.
        interrupt: every ``interrupt``-th batch of an epoch is plain; 0 never interrupts. Default 2.
    """
    return Schedule(start=start, end=end, interrupt=interrupt, progress=TrainerProgress())


def bind_progress(options: Mapping[str, Any], read: Callable[[], float]) -> None:
    """Attach ``read`` to the :class:`TrainerProgress` of ``options["schedule"]``, if it has one."""
    schedule = options.get("schedule")
    progress = getattr(schedule, "progress", None)
    if isinstance(progress, TrainerProgress):
        progress.bind(read)


def planned_batches(per_epoch: int, accumulate: int = 1, max_steps: int | None = None,
                    max_epochs: float | None = None) -> int | None:  # fmt: skip
    """Loader batches a trainer will draw in the whole run, as Lightning and the transformers Trainer plan it.

    An epoch of ``per_epoch`` loader batches makes ``ceil(per_epoch / accumulate)`` optimizer steps (the last
    one on the remainder). The run ends at ``max_steps`` optimizer steps or after ``max_epochs`` epochs (a float
    is rounded up to whole optimizer steps, as the transformers Trainer rounds it), whichever comes first.

    Args:
        per_epoch: loader batches per epoch, an int >= 1.
        accumulate: loader batches per optimizer step (gradient accumulation), an int >= 1. Default 1.
        max_steps: optimizer steps of the run; None or a value < 0: no limit. Default None.
        max_epochs: epochs of the run, > 0; None or a value < 0: no limit. Default None.

    Returns:
        The loader batches of the run, or None where neither limit is set.
    """
    steps_per_epoch = math.ceil(per_epoch / accumulate)
    limits = []
    if max_steps is not None and max_steps >= 0:
        limits.append(max_steps)
    if max_epochs is not None and max_epochs >= 0:
        limits.append(math.ceil(max_epochs * steps_per_epoch))
    if not limits:
        return None
    epochs, steps = divmod(min(limits), steps_per_epoch)
    return epochs * per_epoch + min(steps * accumulate, per_epoch)
