"""Observed ids on their way to the host, in groups: no copy, and so no wait, per ``observe()`` call.

``observe(batch, losses)`` receives the ids of a batch the loader yielded: a tensor on the scoring device, or a
:class:`~sbdata.KeptColumn` whose kept indices are there. The losses are written on the device at once where the
device knows where they go (dense ids); what the host must learn (when each sample was measured, and for keyed
ids the keys themselves) waits here. Every :data:`SHIP_EVERY` observations travel to the host in one non-blocking copy
(:class:`~sbdata._hostcopy.HostCopy`), applied once it has landed; at the end of each epoch the rest start their copy
too, applied once landed (at a later lookup). Only ``state_dict`` and asking the cache what it holds (``len``, ``in``)
wait for them (one synchronisation each): an epoch of SB steps, its end included, never waits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from sbdata.batch import HostCopy

SHIP_EVERY = 64  # observations whose ids travel to the host in one copy


class Observation(NamedTuple):
    """One ``observe()`` call waiting for its ids.

    Attributes:
        ids: (n,) integer tensor on the device: the ids themselves, or positions into ``keys``.
        now: when the losses were measured (in the cache's unit).
        losses: (n,) float32 losses still to be written once the ids are known, or None when already written.
        restamp: whether the samples count as measured at ``now`` (see ``LossCache(refresh=...)``).
        keys: for a :class:`~sbdata.KeptColumn`, the loader batch's column that ``ids`` index; else None.
    """

    ids: torch.Tensor
    now: int
    losses: torch.Tensor | None
    restamp: bool
    keys: Sequence[Any] | None


class InFlight:
    """Observations whose ids are still on the device, shipped to the host :data:`SHIP_EVERY` at a time."""

    def __init__(self) -> None:
        self._open: list[Observation] = []
        self._shipped: deque[tuple[HostCopy, list[Observation]]] = deque()

    def __bool__(self) -> bool:
        return bool(self._open or self._shipped)

    def add(self, observation: Observation) -> None:
        """Hold one observation; a full group starts its copy to the host (non-blocking)."""
        self._open.append(observation)
        if len(self._open) >= SHIP_EVERY:
            self.ship()

    def ship(self) -> None:
        """Start the copy of the observations not yet on their way (non-blocking)."""
        if self._open:
            ids = torch.cat([observation.ids.reshape(-1).long() for observation in self._open])
            self._shipped.append((HostCopy(ids), self._open))
            self._open = []

    def landed(self, wait: bool) -> Iterator[tuple[Any, Observation]]:
        """The observations whose ids have reached the host, oldest first, each with its host ids (an int array, or
        the list of keys); with ``wait``, all of them (one synchronisation)."""
        if wait:
            self.ship()
        while self._shipped and (wait or self._shipped[0][0].ready()):
            copy, group = self._shipped.popleft()
            values, offset = copy.value(), 0
            for observation in group:
                n = observation.ids.numel()
                host: np.ndarray = values[offset : offset + n]
                offset += n
                if observation.keys is None:
                    yield host, observation
                else:
                    keys = observation.keys
                    yield [keys[i] for i in host.tolist()], observation

    def clear(self) -> None:
        self._open.clear()
        self._shipped.clear()
