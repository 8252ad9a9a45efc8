"""``nan_policy="raise"`` without a host-device synchronisation per SB step."""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from ._hostcopy import HostCopy

__all__ = ["FiniteCheck"]

MAX_PENDING = 64  # SB steps whose flag may be in flight before the oldest is waited for


class FiniteCheck:
    """Checks that every score of an SB step is finite, reading the answer only once it has reached the host.

    Each step's "any non-finite" flag is copied to the host asynchronously (:class:`~sbdata._hostcopy.HostCopy`)
    and read as soon as it has landed: on the CPU at once (the error names the batch being selected), on CUDA at
    a later SB step, normally the next one. :meth:`settle` reads every flag still in flight (one synchronisation);
    the engine calls it at the end of each epoch and in ``state_dict``, so a non-finite loss never goes unreported.
    """

    def __init__(self) -> None:
        self._pending: deque[tuple[int, torch.Tensor, HostCopy]] = deque()

    def add(self, finite: torch.Tensor, step: int) -> None:
        """Queue the check of loader batch ``step``'s (N,) ``finite`` mask; raise for any step already known bad."""
        self._pending.append((step, finite, HostCopy((~finite).any().reshape(1))))
        self.poll()

    def poll(self) -> None:
        """Read every flag that has landed (and the oldest ones, beyond ``MAX_PENDING`` in flight)."""
        while self._pending and (self._pending[0][2].ready() or len(self._pending) > MAX_PENDING):
            self._read()

    def settle(self) -> None:
        """Read every flag still in flight, waiting for the device if need be."""
        while self._pending:
            self._read()

    def _read(self) -> None:
        step, finite, flag = self._pending.popleft()
        if not flag.value()[0]:
            return
        self._pending.clear()
        positions = np.flatnonzero(~HostCopy(finite).value()).tolist()
        raise ValueError(
            f"non-finite loss at batch positions {positions[:20]} of loader batch {step}: fix the data "
            "or the model, or pass nan_policy='drop' to skip such samples or 'keep' to treat them as the hardest"
        )
