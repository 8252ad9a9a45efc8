"""Epoch-level pruning: a sampler that skips, each epoch, samples the loss cache says are already learned.

Each epoch the sampler reads every sample's last known loss from a dense :class:`~sbdata.LossCache` (one read, on
the host), applies a pruning rule (:mod:`sbdata.pruning`'s rules; InfoBatch by default) and yields the kept indices,
shuffled with a generator of its own seeded by ``(seed, epoch)``. Samples never seen are always kept; the last
``anneal`` share of the epochs runs on the full data. The kept low-loss samples' loss weights come from
:meth:`PruningSampler.weights`; the losses flow back with :meth:`PruningSampler.observe` (or ``SBLoader.observe``
when SBLoader shares the cache).

**Distributed**: like ``DistributedSampler``, every rank draws the same epoch plan (same seed, same cache) and
takes a disjoint shard of equal length (padded by repeating the plan's first indices, or truncated with
``drop_last``). Each rank observes only its own shard's losses, so before planning an epoch the sampler merges the
ranks' caches: for each sample, the entry measured last wins (ties: the highest rank), with three ``all_reduce``
calls over the cache (so ``set_epoch`` must be called on every rank, as for ``DistributedSampler``).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch.utils.data import Sampler

import sbdata.distributed as _dist
from sbdata.cache import LossCache
from sbdata.pruning import _rules as prune_rules

__all__ = ["PruningSampler"]

Rule = Callable[[torch.Tensor, torch.Tensor, float, torch.Generator], torch.Tensor]
RULES: dict[str, Rule] = {
    "infobatch": prune_rules.infobatch,
    "percentile": prune_rules.below_percentile,
    "random": prune_rules.random_like_infobatch,
    "top_losses": prune_rules.top_losses,
}


def _rule_name(rule: Rule) -> str:
    func = rule.func if isinstance(rule, partial) else rule
    return getattr(func, "__qualname__", type(func).__name__)


class PruningSampler(Sampler[int]):
    """Indices of a map-style dataset, minus the samples each epoch's pruning rule drops.

    Args:
        data: the dataset (anything with ``len``) or its length N.
        cache: a dense ``LossCache(size=N)``, the one the training step observes (and SBLoader uses, if any).
        epochs: total epochs of the run, >= 1 (the annealing epochs are its last ones).
        prune: pruning share ``r`` in [0, 1): of the samples the rule marks (below-mean losses for InfoBatch), this
            share is dropped each epoch. Default 0.5. 0 disables pruning.
        rule: ``"infobatch"`` (default), ``"percentile"`` (below the median), ``"random"`` (the control),
            ``"top_losses"`` (top-k by last loss plus a re-check share: :func:`~sbdata.pruning.top_losses`), or a
            rule ``(losses, known, prune, generator) -> weights`` (see :mod:`sbdata.pruning`).
        anneal: share of the final epochs that train on the full data, in [0, 1]; ``ceil(anneal * epochs)``
            epochs. Default 0.125.
        shuffle: shuffle the kept indices each epoch. Default True.
        seed: base seed of the per-epoch generator (the same on every rank). Default 0.
        generator: alternatively, a ``torch.Generator`` whose ``initial_seed()`` is the base seed (never advanced).
        num_replicas, rank: the distributed world size and this rank; default from ``torch.distributed`` when it
            is initialised, else 1 and 0.
        drop_last: drop the plan's tail so it divides among the ranks, instead of padding. Default False.
        sync_cache: merge the ranks' caches before planning each epoch (needs an initialised process group).
            Default True with more than one replica; pass False only when every rank's cache already holds the
            same losses (e.g. you all-gather the observed losses yourself).
    """

    def __init__(
        self,
        data: Any,
        cache: LossCache,
        *,
        epochs: int,
        prune: float = 0.5,
        rule: str | Rule = "infobatch",
        anneal: float = 0.125,
        shuffle: bool = True,
        seed: int = 0,
        generator: torch.Generator | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        sync_cache: bool | None = None,
    ) -> None:
        size = data if isinstance(data, int) and not isinstance(data, bool) else None
        if size is None:
            if not hasattr(data, "__len__"):
                raise TypeError(f"PruningSampler needs a map-style dataset or its length, got {type(data).__name__}")
            size = len(data)
        if not isinstance(cache, LossCache) or not cache.dense or cache.size != size:
            raise ValueError(f"PruningSampler needs a dense LossCache(size={size}) over the dataset, got {cache!r}")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"epochs must be the run's total epochs, an int >= 1, got {epochs!r}")
        if not 0.0 <= prune < 1.0:
            raise ValueError(f"prune must be in [0, 1) (the share of marked samples dropped), got {prune!r}")
        if not 0.0 <= anneal <= 1.0:
            raise ValueError(f"anneal must be in [0, 1] (share of final epochs on full data), got {anneal!r}")
        if isinstance(rule, str):
            if rule not in RULES:
                raise ValueError(f"rule must be one of {sorted(RULES)} or a rule function, got {rule!r}")
            rule = RULES[rule]
        elif not callable(rule):
            raise TypeError(f"rule must be a name or a callable rule, got {type(rule).__name__}")
        if generator is not None:
            seed = generator.initial_seed()
        own_rank, world = _dist.rank_and_world()
        num_replicas = world if num_replicas is None else num_replicas
        rank = own_rank if rank is None else rank
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas), got rank={rank}, num_replicas={num_replicas}")
        sync_cache = num_replicas > 1 if sync_cache is None else sync_cache
        if sync_cache and num_replicas > 1 and not _dist.in_job():
            raise ValueError(
                "merging the ranks' caches needs an initialised torch.distributed process group: call "
                "init_process_group first, or pass sync_cache=False if every rank's cache holds the same losses"
            )
        self.size, self.cache, self.epochs, self.prune = size, cache, epochs, float(prune)
        self.rule, self.anneal, self.shuffle, self.seed = rule, float(anneal), shuffle, int(seed)
        self.num_replicas, self.rank, self.drop_last = num_replicas, rank, drop_last
        self.sync_cache = sync_cache and num_replicas > 1
        self.full_from = epochs - math.ceil(anneal * epochs - 1e-9)  # first annealing (full-data) epoch
        self.epoch = 0
        self.last_decision_seconds = 0.0  # host seconds of the last epoch plan (cache merge included)
        self._planned = -1  # the epoch the plan below is for
        self._order = torch.empty(0, dtype=torch.long)  # the epoch's kept indices, in order, before sharding
        self._weight = torch.ones(size, dtype=torch.float32)
        self._on_device: dict[torch.device, torch.Tensor] = {}
        self._iterations = 0  # iter() calls on the current plan, to warn about a forgotten set_epoch
        self._known_at_plan = 0  # losses known when the plan was made
        self._warned = False

    # ----------------------------------------------------------------- the plan
    def set_epoch(self, epoch: int) -> None:
        """Plan ``epoch`` (0-based) from the cache as it is now; call it on every rank before each epoch."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        self.epoch = epoch
        if self._planned != epoch:
            self._plan()

    def _plan(self) -> None:
        started = time.perf_counter()
        if self.sync_cache:
            self._merge_ranks()
        weights = torch.ones(self.size, dtype=torch.float32)
        losses, when = self.cache.dense_entries()
        losses, when = losses.cpu(), when.cpu()
        known = (when >= 0) & torch.isfinite(losses)
        self._known_at_plan = int(known.sum())
        if self.prune > 0 and self.epoch < self.full_from:
            weights = self.rule(losses, known, self.prune, self._generator())
            if not isinstance(weights, torch.Tensor) or weights.shape != (self.size,):
                raise ValueError(f"the pruning rule {_rule_name(self.rule)} must return ({self.size},) weights")
            weights = weights.to(torch.float32)
            if not bool(torch.isfinite(weights).all() and (weights >= 0).all()):
                raise ValueError(f"the pruning rule {_rule_name(self.rule)} returned negative or non-finite weights")
        order = torch.nonzero(weights > 0).squeeze(1)
        if len(order) == 0:
            raise ValueError(f"the pruning rule {_rule_name(self.rule)} pruned all {self.size} samples of epoch "
                             f"{self.epoch}: a rule must keep at least one")  # fmt: skip
        if self.shuffle:
            order = order[torch.randperm(len(order), generator=self._generator(1))]
        self._order, self._weight, self._on_device = order, weights, {}
        self._planned, self._iterations = self.epoch, 0
        self.last_decision_seconds = time.perf_counter() - started

    def _generator(self, stream: int = 0) -> torch.Generator:
        """The epoch's own generator (stream 0: the rule, 1: the shuffle), the same on every rank."""
        return torch.Generator().manual_seed((self.seed * 1_000_003 + self.epoch * 2 + stream) % 2**63)

    def _merge_ranks(self) -> None:
        """Make every rank's cache hold, per sample, the entry measured last (ties: the highest rank's)."""
        merged, taken = _dist.merge_latest(*self.cache.dense_entries(), self.rank)
        update = taken >= 0
        for measured in torch.unique(taken[update]).tolist():
            ids = torch.nonzero(update & (taken == measured)).squeeze(1)
            self.cache.record_entries(ids, merged[ids], int(measured))  # measured then, whatever the refresh

    def _shard(self) -> torch.Tensor:
        order, replicas = self._order, self.num_replicas
        if replicas == 1 or len(order) == 0:
            return order
        if self.drop_last:
            order = order[: len(order) // replicas * replicas]
        else:
            padding = -len(order) % replicas
            order = torch.cat([order, order.repeat(math.ceil(padding / len(order)))[:padding]])
        return order[self.rank :: replicas]

    # ----------------------------------------------------------------- the sampler
    def __len__(self) -> int:
        """Indices this rank yields in the current epoch (exact)."""
        if self._planned != self.epoch:
            self._plan()
        kept = len(self._order)
        if self.num_replicas == 1 or kept == 0:
            return kept
        return kept // self.num_replicas if self.drop_last else math.ceil(kept / self.num_replicas)

    def __iter__(self):
        if self._planned != self.epoch:
            self._plan()
        self._iterations += 1
        repeated = self._iterations > 1 and self._known_at_plan == 0 and not self._warned
        if repeated and self.epoch < self.full_from and self.prune > 0 and len(self.cache) > 0:
            self._warned = True
            warnings.warn(
                f"PruningSampler repeats epoch {self.epoch}'s plan, made before any loss was known, so it prunes "
                "nothing: call sampler.set_epoch(epoch) (or loader.set_epoch) before each epoch",
                stacklevel=2,
            )
        return iter(self._shard().tolist())

    @property
    def kept(self) -> int:
        """Samples kept this epoch over all ranks (before padding): the data loaded per epoch."""
        len(self)
        return len(self._order)

    def weights(self, ids: Any, device: torch.device | str | None = None) -> torch.Tensor:
        """Loss weights of ``ids`` this epoch (1/(1-prune) for kept low-loss samples, else 1), float32 on ``device``
        (default: the ids' device, the host for a list); no host-device sync."""
        device = torch.device(device if device is not None else getattr(ids, "device", "cpu"))
        table = self._on_device.get(device)
        if table is None:
            table = self._on_device[device] = self._weight.to(device)
        return table.index_select(0, torch.as_tensor(ids, device=device).long())

    def observe(self, ids: Any, losses: torch.Tensor) -> None:
        """Record the training step's per-sample losses of ``ids`` into the cache at this epoch (no sync).

        They count as measured now whatever the cache's ``refresh``: the sampler never scores, so these are its
        measurements, and merging the ranks' caches picks each sample's entry measured last.
        """
        if self.cache.unit != "epoch":
            raise ValueError("a LossCache counted in steps takes losses through SBLoader.observe, not the sampler's")
        self.cache.observe(ids, losses, self.epoch, restamp=True)

    # ----------------------------------------------------------------- state
    def _options(self) -> dict[str, Any]:
        return {"size": self.size, "prune": self.prune, "anneal": self.anneal, "epochs": self.epochs,
                "rule": _rule_name(self.rule), "shuffle": self.shuffle, "seed": self.seed}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """The epoch, its plan (kept order and weights) and the options; loads with ``weights_only=True``."""
        len(self)
        return {**self._options(), "epoch": self.epoch, "order": self._order.clone(), "weight": self._weight.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the saved epoch with its saved plan (the cache has moved on since it was made)."""
        for name, value in self._options().items():
            saved = state[name]
            if saved != value:
                raise ValueError(f"the state was saved with {name}={saved!r}, this sampler has {value!r}")
        self.epoch, self._planned, self._iterations = int(state["epoch"]), int(state["epoch"]), 0
        self._order, self._weight, self._on_device = state["order"].long().clone(), state["weight"].float(), {}

    def __repr__(self) -> str:
        return (
            f"PruningSampler(size={self.size}, prune={self.prune}, rule={_rule_name(self.rule)}, "
            f"anneal={self.anneal}, epochs={self.epochs}, rank={self.rank}/{self.num_replicas})"
        )
