"""What every front end exposes of its engine, written once: statistics, observe, and the engine's state."""

from __future__ import annotations

from typing import Any

from sbdata._util import flush_deferred_warnings
from sbdata.engine import SBStats, SelectionEngine

__all__ = ["EngineFront"]


class EngineFront:
    """Mixin for front ends holding a :class:`~sbdata.SelectionEngine` as ``self.engine``.

    The state is ``{ENGINE_KEY: engine state, **self._source_state()}``; a front end adds only its source's own
    state (e.g. a stateful loader's) through the two hooks. Loading a state never starts a pass: the front end's
    next pass calls ``engine.start_pass()``, which continues the saved epoch if it had not ended.
    """

    ENGINE_KEY = "engine"
    engine: SelectionEngine

    @property
    def stats(self) -> SBStats:
        """Running statistics; reading them moves two numbers from the device."""
        return self.engine.stats

    def observe(self, batch: Any, losses: Any) -> None:
        """Give the training step's per-sample losses for a yielded batch to the engine: the cache (see ``LossCache``)
        and the scoring-mode check (see ``SelectionEngine.observe``)."""
        flush_deferred_warnings()
        self.engine.observe(batch, losses)

    def state_dict(self) -> dict[str, Any]:
        """The engine's state and the source's; loads with ``torch.load(..., weights_only=True)``."""
        flush_deferred_warnings()
        return {self.ENGINE_KEY: self.engine.state_dict(), **self._source_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state; the next pass continues the saved epoch, or starts the next one if it had ended."""
        if not isinstance(state, dict) or self.ENGINE_KEY not in state:
            found = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"expected a state_dict() of this front end with key {self.ENGINE_KEY!r}, got {found}")
        self.engine.load_state_dict(state[self.ENGINE_KEY])
        self._load_source_state(state)

    def _source_state(self) -> dict[str, Any]:
        return {}

    def _load_source_state(self, state: dict[str, Any]) -> None:
        pass
