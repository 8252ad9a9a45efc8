"""What every front end exposes of its engine, written once."""

from __future__ import annotations

from typing import Any

from .engine import SelectionEngine
from .stats import SBStats

__all__ = ["EngineFront"]


class EngineFront:
    """Mixin for front ends holding a :class:`~sbdata.SelectionEngine` as ``self.engine``."""

    engine: SelectionEngine

    @property
    def stats(self) -> SBStats:
        """Running statistics; reading them moves two numbers from the device."""
        return self.engine.stats

    def observe(self, batch: Any, losses: Any) -> None:
        """Give the training step's per-sample losses for a yielded batch to the cache (see ``LossCache``)."""
        self.engine.observe(batch, losses)
