"""sbdata's ``torch.distributed`` plumbing, in one place: where the process stands in a job, which group selects in
lockstep, and the collectives every distributed part uses (the lockstep's agreements and gathers, ``keep="auto"``'s
sums, the ``PruningSampler``'s cache merge). ``sbdata.distributed`` holds the public :class:`~sbdata.distributed.
Lockstep`, built on these.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

__all__ = ["in_job", "joined_late", "merge_latest", "rank_and_world", "scoring_module"]

SYNC_MODES = ("local", "global")


# ----------------------------------------------------------------- where this process stands
def in_job() -> bool:
    """Whether ``torch.distributed`` is available and initialised in this process."""
    return dist.is_available() and dist.is_initialized()


def joined_late() -> bool:
    """Whether a default group of several ranks exists now (asked of an engine built before there was one)."""
    return in_job() and dist.get_world_size() > 1


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the default group's size; ``(0, 1)`` outside ``torch.distributed``."""
    if not in_job():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def scoring_module(model: nn.Module) -> nn.Module:
    """The module the scoring pass calls: ``model.module`` for DDP, ``model`` itself otherwise (FSDP included).

    DDP's own forward is not side-effect free even under ``no_grad``: with ``broadcast_buffers=True`` (the
    default) and a model with buffers it broadcasts them from rank 0 (a collective), and it then clears the flag
    that makes the next training forward broadcast them. The wrapped module holds the same, fully replicated
    parameters, so scoring through it is exact and local. FSDP shards the parameters, so an FSDP model is scored
    through its wrapper, which gathers them; the lockstep makes every rank do so together.
    """
    return model.module if isinstance(model, DistributedDataParallel) else model


def lockstep_group(sync: str, process_group: Any) -> Any:
    """The group whose ranks select in lockstep, or None when this process runs alone (no job, or a group of one).

    Raises:
        ValueError: for an unknown ``sync``, ``sync="global"`` without an initialised process group, or a group
            this process is not a member of.
        TypeError: for a ``process_group`` that is not a ``torch.distributed.ProcessGroup``.
    """
    if sync not in SYNC_MODES:
        raise ValueError(f"sync must be one of {SYNC_MODES}, got {sync!r}")
    initialised = in_job()
    if initialised and process_group is dist.GroupMember.NON_GROUP_MEMBER:  # what new_group gives non-members
        raise ValueError("this process is not a member of process_group: pass a group that contains every rank")
    if process_group is not None and not (initialised and isinstance(process_group, dist.ProcessGroup)):
        raise TypeError(
            f"process_group must be a torch.distributed.ProcessGroup of an initialised job or None (the default "
            f"group), got {type(process_group).__name__}"
        )
    if not initialised:
        if sync == "global":
            raise ValueError(
                "sync='global' shares losses across ranks, but torch.distributed is not initialised: call "
                "torch.distributed.init_process_group() before building the loader, or use sync='local'"
            )
        return None
    group = process_group if process_group is not None else dist.group.WORLD
    return None if dist.get_world_size(group) == 1 else group


def takes_cpu_tensors(group: Any) -> bool:
    """Whether the group's backend has a CPU implementation ("cpu:gloo,cuda:nccl" has; "cuda:nccl" has not)."""
    config = dist.get_backend_config(group) if hasattr(dist, "get_backend_config") else dist.get_backend(group)
    return "cpu:" in str(config) or any(name in str(config) for name in ("gloo", "mpi"))


# ----------------------------------------------------------------- collectives
def reduce_min(values: list[int], group: Any, device: torch.device) -> list[int]:
    """Element-wise minimum of ``values`` over the group's ranks: one ``all_reduce`` of ``8 * len(values)`` bytes."""
    flags = torch.tensor(values, dtype=torch.int64, device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.MIN, group=group)
    return flags.tolist()


def reduce_sum(values: list[float], group: Any, device: torch.device) -> list[float]:
    """Element-wise sum of ``values`` over the group's ranks (float64): one ``all_reduce``."""
    sums = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
    return sums.tolist()


def gather_padded(scores: torch.Tensor, width: int, rank: int, world: int, group: Any) -> tuple[torch.Tensor, int]:
    """Every rank's ``scores`` (each at most ``width`` long) in rank order, and where this rank's begin: one
    ``all_gather`` of NaN-padded rows (scores reaching it are finite or +inf, so NaN marks padding only), and one
    host synchronisation to drop the padding."""
    padded = torch.full((width,), torch.nan, dtype=scores.dtype, device=scores.device)
    padded[: scores.shape[0]] = scores
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded, group=group)
    gathered = torch.cat(parts)
    valid = ~torch.isnan(gathered)
    offset = int(valid[: rank * width].sum())
    return gathered[valid], offset


def merge_latest(losses: torch.Tensor, when: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sample, the entry measured last over the default group's ranks (ties: the highest rank's): three
    ``all_reduce``s of a dense cache's ``(size,)`` losses and measure times.

    Returns:
        ``(merged, taken)``: the merged losses, and for each sample the measure time of another rank's entry that
        replaces this rank's own (-1 where this rank's entry stays, or none was measured).
    """
    latest = when.clone()
    dist.all_reduce(latest, op=dist.ReduceOp.MAX)
    owner = torch.where((when == latest) & (latest >= 0), rank, -1).to(torch.int32)
    dist.all_reduce(owner, op=dist.ReduceOp.MAX)
    mine = owner == rank
    merged = torch.where(mine, losses, torch.zeros_like(losses))
    dist.all_reduce(merged, op=dist.ReduceOp.SUM)
    return merged, torch.where((owner >= 0) & ~mine, latest, -1)
