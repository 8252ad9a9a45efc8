"""Lockstep selection under ``torch.distributed`` (DDP, FSDP, torchrun); see ``docs/distributed.md``.

With a process group of more than one rank, the engine hands its driver loop to a :class:`Lockstep`, which makes
every rank pull, score and yield in step: a rank never runs a scoring forward or a training step that another
rank does not also run, so collective forwards (FSDP) and backwards (DDP) cannot hang on uneven data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import torch
import torch.distributed as dist

import sbdata.batch as _batch
from sbdata.distributed import _collectives as _dist

__all__ = ["make_lockstep"]

_NO_BATCH = object()
_NO_SIZE = 2**62  # stands in for the batch size of a rank without a batch, so it never lowers the minimum


class LockstepDriven(Protocol):
    """What a :class:`Lockstep` drives: the engine's driver protocol (:class:`~sbdata.SelectionEngine` has it).

    The lockstep calls nothing else, so it depends on no engine type.
    """

    def selects_next(self) -> bool:
        """Whether the schedule selects on the next loader batch (before the ranks agree)."""
        ...

    @property
    def same_count_everywhere(self) -> bool:
        """Whether every rank provably queues the same number of outputs for batches of one size: a fixed-count
        policy, and no ``nan_policy="drop"``."""
        ...

    @property
    def pooled(self) -> bool:
        """Whether outputs are cut to a fixed ``batch_size`` by a pool."""
        ...

    @property
    def outputs_ready(self) -> int:
        """Outputs queued and not yet handed on."""
        ...

    def push(self, batch: Any, emit_empty: bool = False, active: bool | None = None) -> None:
        """Consume one loader batch, selecting on it when ``active``."""
        ...

    def pop_output(self) -> Any:
        """Hand on the oldest queued output."""
        ...

    def end_source(self) -> None:
        """The epoch's source ran out: queue what is held."""
        ...

    def discard_outputs_beyond(self, count: int) -> None:
        """Drop the newest queued outputs until ``count`` remain."""
        ...


def make_lockstep(sync: str, process_group: Any, device: torch.device) -> Lockstep | None:
    """The engine's coordinator for this process, or None when it runs alone (see
    :func:`sbdata.distributed.lockstep_group` for what is refused)."""
    group = _dist.lockstep_group(sync, process_group)
    return None if group is None else Lockstep(group, device)


class Lockstep:
    """Keeps the ranks of a process group in step; the engine's :meth:`next_output` runs through it.

    Protocol, per *round* (one loader batch per rank; a round runs only when some rank has no output left to
    yield, and every rank then takes part):

    1. every rank pulls one loader batch; one ``all_reduce(MIN)`` of four int64 (has a batch, its size, minus its
       size, the schedule's decision) tells all of them whether every rank has one, the smallest and largest
       size, and whether the step selects on every rank;
    2. if some rank has none, the epoch ends on all ranks (below); otherwise every rank pushes its batch, with
       the agreed decision (an SB step only if it is one on every rank, and no rank's batch is empty), so every
       rank runs the same scoring forwards;
    3. ranks agree on ``min(outputs held)`` with a second ``all_reduce(MIN)`` of one int64, and then all yield
       that many without communicating. The second reduction is skipped when every rank provably holds the same
       number: a fixed-count policy and no ``nan_policy="drop"``, unpooled, or pooled with every batch of the
       epoch so far the same size on all ranks (e.g. behind a ``DistributedSampler``).

    End of epoch: the pulled batches of the ranks that still had one are dropped; each rank flushes its pool as
    a single process would (a short batch unless ``drop_last``); one more reduction agrees on the smallest number
    of held outputs, which every rank yields; the rest is dropped, so every rank stops after the same number of
    batches.

    With ``sync="global"``, the policies that use the global batch (``policy.uses_population``) receive every
    rank's candidate scores through one ``all_gather`` per SB step; see :meth:`gather`.

    Args:
        group: the process group the ranks share.
        device: the engine's scoring device; the flags go to the CPU when the group's backend takes CPU tensors.
    """

    def __init__(self, group: Any, device: torch.device) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.flag_device = torch.device("cpu") if _dist.takes_cpu_tensors(group) else device
        self.agreed = 0  # outputs every rank holds and will yield without asking again
        self.ended = False  # the end of the epoch has been agreed
        self.even = True  # every round of this epoch had one batch size on all ranks
        self.round_max: int | None = None  # the largest batch of the round being pushed

    def begin_epoch(self) -> None:
        self.agreed, self.ended, self.even, self.round_max = 0, False, True, None

    def reduce_min(self, values: list[int]) -> list[int]:
        """Element-wise minimum of ``values`` over all ranks: one ``all_reduce`` of ``8 * len(values)`` bytes."""
        return _dist.reduce_min(values, self.group, self.flag_device)

    def reduce_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over all ranks (float64): one ``all_reduce`` (``keep="auto"``'s reads)."""
        return _dist.reduce_sum(values, self.group, self.flag_device)

    # ----------------------------------------------------------------- driving
    def next_output(self, engine: LockstepDriven, source: Iterator[Any]) -> Any:
        """The engine's :meth:`~sbdata.SelectionEngine.next_output` in lockstep with the other ranks.

        Uses only the driver protocol, :class:`LockstepDriven`.
        """
        while self.agreed == 0:
            if self.ended:
                raise StopIteration
            self._round(engine, source)
        self.agreed -= 1
        return engine.pop_output()

    def _round(self, engine: LockstepDriven, source: Iterator[Any]) -> None:
        batch = next(source, _NO_BATCH)
        has = batch is not _NO_BATCH
        size = (_batch.sample_count(batch) or 0) if has else 0
        active = has and engine.selects_next()
        all_have, low, minus_high, all_active = self.reduce_min(
            [int(has), size if has else _NO_SIZE, -size, int(active or not has)]
        )
        if not all_have:
            self._finish(engine)
            return
        self.even = self.even and low == -minus_high
        self.round_max = -minus_high
        try:
            engine.push(batch, active=bool(all_active) and low > 0)
        finally:
            self.round_max = None
        static = engine.same_count_everywhere and (not engine.pooled or self.even)
        ready = engine.outputs_ready
        self.agreed = ready if static else self.reduce_min([ready])[0]

    def _finish(self, engine: LockstepDriven) -> None:
        engine.end_source()
        (self.agreed,) = self.reduce_min([engine.outputs_ready])
        self.ended = True
        engine.discard_outputs_beyond(self.agreed)  # outputs some other rank cannot match: never yielded

    # ----------------------------------------------------------------- global selection
    def gather(self, scores: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Every rank's candidate scores, in rank order, and where this rank's begin: one ``all_gather``.

        Each rank sends its scores padded with NaN to the largest batch of the round (scores reaching a policy
        are finite or +inf, so NaN marks padding only); outside a lockstep round (``SBCollator``) one more
        ``all_reduce`` finds that size first. Costs one host synchronisation, to drop the padding.

        Returns:
            ``(population, offset)``: the (N_global,) scores, in their dtype, on ``scores.device``, and the position of
            this rank's first score in it, so ``population[offset : offset + len(scores)]`` equals ``scores``.
        """
        width = self.round_max if self.round_max is not None else -self.reduce_min([-scores.shape[0]])[0]
        return _dist.gather_padded(scores, width, self.rank, self.world, self.group)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {"agreed": self.agreed, "ended": self.ended, "even": self.even}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agreed = int(state["agreed"])
        self.ended = bool(state["ended"])
        self.even = bool(state["even"])
