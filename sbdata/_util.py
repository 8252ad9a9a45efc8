"""The bottom of sbdata: helpers every layer may use, importing nothing else of sbdata."""

from __future__ import annotations

import collections
import os
import sys
import warnings
from collections.abc import Sized
from types import FrameType
from typing import Any

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10
    from typing_extensions import Unpack

import torch
from torch import nn

__all__ = [
    "Unpack",
    "available_device",
    "epoch_length",
    "flush_deferred_warnings",
    "model_device",
    "warn_from_user_code",
]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Code between sbdata and the user's line: torch (backward, hooks, optimizers), the frameworks that call sbdata
# (their fit loops, save_state), the pipelines around it, and the stdlib's plumbing of threads and context managers.
_LIBRARIES = frozenset(
    {"torch", "accelerate", "lightning", "lightning_fabric", "pytorch_lightning", "transformers", "torchdata"}
    | {"webdataset", "threading", "contextlib"}
)
_deferred: collections.deque[tuple[str, type[Warning]]] = collections.deque()  # raised where no user frame was


def epoch_length(loader: Any) -> int | None:
    """Loader batches per epoch, or None where ``len()`` is missing, raises (a ``DataLoader`` over an
    ``IterableDataset`` without ``__len__``) or is 0."""
    if not isinstance(loader, Sized):
        return None
    try:
        length = len(loader)
    except TypeError:
        return None
    return length if length > 0 else None


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer; the CPU for a model without either."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def available_device(device: torch.device | str) -> torch.device:
    """``device`` as a ``torch.device``, checked to exist on this machine (its backend available, its index below the
    backend's device count).

    Raises:
        ValueError: for a device this machine does not have, naming it and the devices torch reports available.
    """
    device = torch.device(device)
    backend = getattr(torch, device.type, None) if device.type not in ("cpu", "meta") else None
    is_available, count = getattr(backend, "is_available", None), getattr(backend, "device_count", None)
    if is_available is None or (is_available() and (device.index is None or count is None or device.index < count())):
        return device
    found = ["cpu"]
    for kind in ("cuda", "xpu", "mps"):
        module = getattr(torch, kind, None)
        if module is not None and module.is_available():
            found += [kind] if kind == "mps" else [f"{kind}:{i}" for i in range(module.device_count())]
    raise ValueError(
        f"device={str(device)!r} is not available on this machine: torch reports {', '.join(found)} available"
        f"{' (this torch is a CPU-only build: torch.version.cuda is None)' if torch.version.cuda is None else ''}. "
        "Pass one of those, or leave device= out to score where the model is"
    )


def _library_frame(frame: FrameType) -> bool:
    """Whether ``frame`` runs sbdata's code or a library's between sbdata and the user (see ``_LIBRARIES``)."""
    if frame.f_code.co_filename.startswith(_PACKAGE):
        return True
    module = frame.f_globals.get("__name__")
    return isinstance(module, str) and module.partition(".")[0] in _LIBRARIES


def warn_from_user_code(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the innermost caller outside sbdata, torch and the frameworks (the user's
    line), however deep inside them the warning arose.

    Where no such caller exists (an autograd hook run by a backward thread, another thread started inside a
    library), the warning is deferred, and issued by :func:`flush_deferred_warnings` at the next call from the
    user's code into sbdata (the next batch of a loader, ``state_dict``, ``observe``).
    """
    flush_deferred_warnings()
    _warn(message, category, sys._getframe(1), 3)


def _warn(message: str, category: type[Warning], frame: FrameType | None, level: int) -> None:
    """Warn at the first user frame from ``frame``, whose stack level, seen from the ``warnings.warn`` here, is
    ``level``; or defer the warning when there is none."""
    while frame is not None and _library_frame(frame):
        frame, level = frame.f_back, level + 1
    if frame is None:
        _deferred.append((message, category))
        return
    warnings.warn(message, category, stacklevel=level)


def flush_deferred_warnings() -> None:
    """Issue the warnings deferred for want of a user frame, at the user's line that called into sbdata (the first
    frame outside sbdata and the libraries above the caller). Call it where the user's code enters sbdata."""
    if not _deferred:  # the common case, once per batch: one check
        return
    frame = sys._getframe(1)
    pending = [_deferred.popleft() for _ in range(len(_deferred))]  # deferred again if there is still no user frame
    for message, category in pending:
        _warn(message, category, frame, 3)
