"""The bottom of sbdata: helpers every layer may use, importing nothing else of sbdata."""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10
    from typing_extensions import Unpack

import torch
from torch import nn

__all__ = ["Unpack", "model_device", "warn_from_user_code"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer; the CPU for a model without either."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def warn_from_user_code(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the innermost caller outside the sbdata package (the user's loop line),
    however deep inside sbdata the warning arose."""
    frame: FrameType | None = sys._getframe(1)
    level = 2  # stacklevel 2 is this function's caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
