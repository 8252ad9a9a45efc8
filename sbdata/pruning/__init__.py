"""Epoch-level pruning from cached losses: :class:`PruningSampler` and its rules as pure functions.

User API. Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata.pruning import _rules, _sampler
from sbdata.pruning._rules import *
from sbdata.pruning._sampler import *

__all__ = _rules.__all__ + _sampler.__all__
