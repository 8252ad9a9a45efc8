"""``nan_policy="raise"`` without a host-device synchronisation per SB step."""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from sbdata.batch import HostCopy

CHECK_EVERY = 8  # SB steps checked by one flag
MAX_PENDING = 8  # flags that may be in flight before the oldest is waited for


class FiniteCheck:
    """Checks that every score of an SB step is finite, reading the answer only once it has reached the host.

    The scores of ``CHECK_EVERY`` SB steps are checked together: one "all finite" flag, copied to the host
    asynchronously (:class:`~sbdata._hostcopy.HostCopy`) and read once it has landed (on the CPU at once, on CUDA
    normally by the next group). A non-finite loss is therefore reported at most a few SB steps after the batch
    that had it, naming that batch and the positions. :meth:`settle` checks everything still unread (one
    synchronisation); the engine calls it at the end of each epoch and in ``state_dict``, so a non-finite loss
    never goes unreported.
    """

    def __init__(self) -> None:
        self._unchecked: list[tuple[int, torch.Tensor]] = []
        self._pending: deque[tuple[list[tuple[int, torch.Tensor]], HostCopy]] = deque()

    def add(self, scores: torch.Tensor, step: int) -> None:
        """Queue the check of loader batch ``step``'s (N,) ``scores``; raise for any earlier batch found bad."""
        self._unchecked.append((step, scores))
        if len(self._unchecked) >= CHECK_EVERY:
            self._launch()
            self.poll()

    def _launch(self) -> None:
        group, self._unchecked = self._unchecked, []
        scores = group[0][1] if len(group) == 1 else torch.cat([scores for _, scores in group])
        if scores.is_floating_point():
            # the sum is finite iff every score is (NaN and inf carry through it) unless it overflows, which only
            # costs a look at the group's scores in _read: three element-wise passes fewer than isfinite().all()
            total = scores.sum()
            flag = (total - total).eq(0)
        else:
            flag = torch.isfinite(scores).all()
        self._pending.append((group, HostCopy(flag.reshape(1))))

    def poll(self) -> None:
        """Read every flag that has landed (and the oldest ones, beyond ``MAX_PENDING`` in flight)."""
        while self._pending and (self._pending[0][1].ready() or len(self._pending) > MAX_PENDING):
            self._read()

    def settle(self) -> None:
        """Check everything still unread, waiting for the device if need be."""
        if self._unchecked:
            self._launch()
        while self._pending:
            self._read()

    def _read(self) -> None:
        group, flag = self._pending.popleft()
        if flag.value()[0]:
            return
        for step, scores in group:
            positions = np.flatnonzero(~np.isfinite(HostCopy(scores).value())).tolist()
            if positions:
                self._pending.clear()
                raise ValueError(
                    f"non-finite loss at batch positions {positions[:20]} of loader batch {step}: fix the data "
                    "or the model, or pass nan_policy='drop' to skip such samples or 'keep' to treat them as the "
                    "hardest"
                )
