"""Epoch-level pruning from cached losses: :class:`PruningSampler` and its rules as pure functions."""

from sbdata.pruning._rules import below_percentile, infobatch, random_like_infobatch, top_losses
from sbdata.pruning._sampler import PruningSampler

__all__ = [
    "PruningSampler",
    "below_percentile",
    "infobatch",
    "random_like_infobatch",
    "top_losses",
]
