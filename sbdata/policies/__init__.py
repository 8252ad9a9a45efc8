"""Selection policies, sbdata's extension point: the contract, the built-in policies, the sampling helpers a
custom policy is made of, and the registry of names.

A third-party policy subclasses :class:`SelectionPolicy`, declares ``fixed_count`` and ``weighted``, and implements
``select`` (see ``examples/custom_policy.py``); it needs nothing outside this module's ``__all__``.
"""

from sbdata.policies._base import PolicyOptions, ScoreContext, Selection, SelectionPolicy, keep_count
from sbdata.policies._builtin import RandomK, RankWeighted, TopK
from sbdata.policies._history import HistoryPercentile
from sbdata.policies._importance import ImportanceDraw
from sbdata.policies._reducible import ReducibleSelect
from sbdata.policies._registry import POLICIES, resolve_policy
from sbdata.policies._sampling import FLOOR, gumbel_top_k, importance_log_weights, rank_log_weights

__all__ = [
    "FLOOR",
    "POLICIES",
    "HistoryPercentile",
    "ImportanceDraw",
    "PolicyOptions",
    "RandomK",
    "RankWeighted",
    "ReducibleSelect",
    "ScoreContext",
    "Selection",
    "SelectionPolicy",
    "TopK",
    "gumbel_top_k",
    "importance_log_weights",
    "keep_count",
    "rank_log_weights",
    "resolve_policy",
]
