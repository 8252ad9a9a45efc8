"""Moving small tensors between the host and the scoring device without making either wait for the other.

sbdata's SB step never reads a device value on the host while the step runs (that would make the host wait for
every kernel queued before it, including the previous training step). Values the host needs later (the non-finite
flag, ids handed to ``observe``) travel as :class:`HostCopy`: on CUDA a non-blocking copy into pinned memory plus an
event, read once the event has completed, so reading it never waits for the device. Everything sbdata reads from
a device tensor goes through this module; ``tests/checks/test_syncs.py`` checks that nothing else does.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["HostCopy", "upload"]


class HostCopy:
    """A device tensor's value on its way to the host.

    On CUDA the copy is issued non-blocking into pinned memory and an event marks its completion: :meth:`ready`
    asks the event (never waits) and :meth:`value` reads the host buffer. On the CPU the value is already there.
    On other accelerators the copy is a plain (synchronising) one, made when the value is first read.

    Args:
        tensor: the tensor to copy; it is detached, and kept only until its copy is read.
    """

    def __init__(self, tensor: torch.Tensor) -> None:
        tensor = tensor.detach()
        self._event: torch.cuda.Event | None = None
        self._source: torch.Tensor | None = None
        if tensor.device.type == "cuda":
            self._host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            self._host.copy_(tensor, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(tensor.device))
        elif tensor.device.type == "cpu":
            self._host = tensor
        else:
            self._host = tensor
            self._source = tensor  # copied when read (one synchronisation)

    def ready(self) -> bool:
        """Whether :meth:`value` can be read without waiting for the device."""
        return self._source is None and (self._event is None or self._event.query())

    def value(self) -> np.ndarray:
        """The values on the host; waits for the copy if it has not landed yet (a synchronisation on CUDA)."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        if self._source is not None:
            self._host, self._source = self._source.cpu(), None
        return self._host.numpy()


def upload(values: np.ndarray | list, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Host values as a tensor on ``device``; on CUDA through pinned memory, non-blocking (no synchronisation)."""
    host = torch.as_tensor(np.asarray(values), dtype=dtype)
    if device.type == "cpu":
        return host
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)
