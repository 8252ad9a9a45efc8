"""Per-task hooks (split, forward, per-sample loss) for models whose batches are not ``(x, y)``: causal language
models, sequence classification and token classification.

User API. Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata.tasks import _hooks
from sbdata.tasks._hooks import *

__all__ = _hooks.__all__
