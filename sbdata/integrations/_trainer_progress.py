"""A Schedule driven by a trainer's own progress, bound when the trainer builds the loader."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sbdata.engine import Schedule

__all__ = ["TrainerProgress", "bind_progress", "trainer_schedule"]


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
