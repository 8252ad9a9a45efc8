"""Policy names and their classes."""

from __future__ import annotations

from typing import Any

from sbdata.policies._base import SelectionPolicy
from sbdata.policies._builtin import RandomK, RankWeighted, TopK
from sbdata.policies._history import HistoryPercentile
from sbdata.policies._importance import ImportanceDraw

__all__ = ["POLICIES", "resolve_policy"]

POLICIES: dict[str, type[SelectionPolicy]] = {
    "history": HistoryPercentile,
    "importance": ImportanceDraw,
    "random": RandomK,
    "rank": RankWeighted,
    "topk": TopK,
}


def resolve_policy(policy: Any) -> SelectionPolicy:
    """A policy instance from a name in :data:`POLICIES` or an instance (returned as is).

    Raises:
        ValueError: for an unknown name, listing the known ones.
        TypeError: for anything that is neither.
    """
    if isinstance(policy, SelectionPolicy):
        return policy
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}: choose one of {sorted(POLICIES)} or pass a SelectionPolicy")
        return POLICIES[policy]()
    raise TypeError(f"policy must be a name from {sorted(POLICIES)} or a SelectionPolicy, got {type(policy).__name__}")
