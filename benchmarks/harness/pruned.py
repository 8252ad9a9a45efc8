"""Epochs drawn by a :class:`sbdata.PruningSampler`: the batches of a pruned epoch and the probe of a run over them
(shared by the pruning and the continued-training benchmarks)."""

from __future__ import annotations

import math
from typing import Any

import torch

from ._sb import PruningSampler, SBLoader
from .arms import Probe


class PrunedBatches:
    """Batches of tensors in the order a :class:`PruningSampler` gives each epoch (the last field holds the ids).

    Loader progress is counted in full-epoch batches, so an LR schedule keyed to progress ends with the last epoch
    whatever the pruning did.
    """

    def __init__(self, tensors: tuple[torch.Tensor, ...], batch_size: int, sampler: PruningSampler) -> None:
        self.tensors, self.batch_size, self.sampler = tensors, batch_size, sampler
        self.full_batches = math.ceil(len(tensors[0]) / batch_size)
        self.epoch, self.yielded, self.epoch_batches = 0, 0, self.full_batches
        self.loaded: list[int] = []  # samples loaded per epoch
        self.decision_seconds: list[float] = []

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self.batch_size)

    def progress(self) -> float:
        """Loader progress in full-epoch batches, including the batch just taken."""
        return self.epoch * self.full_batches + self.yielded * self.full_batches / self.epoch_batches

    def __iter__(self):
        order = torch.as_tensor(list(self.sampler), dtype=torch.long)
        self.loaded.append(len(order))
        self.decision_seconds.append(self.sampler.last_decision_seconds)
        self.epoch_batches, self.yielded = max(1, math.ceil(len(order) / self.batch_size)), 0
        for start in range(0, len(order), self.batch_size):
            index = order[start : start + self.batch_size]
            self.yielded += 1
            yield tuple(t[index] for t in self.tensors)


class PruneProbe(Probe):
    """A probe whose progress comes from the pruned epochs, and which weighs and observes losses."""

    def __init__(self, batches: PrunedBatches, sampler: PruningSampler, loader: SBLoader | None, full: int) -> None:
        super().__init__(full, loader=loader, observe=True)
        self.batches, self.sampler = batches, sampler

    def consumed(self, steps: int) -> float:  # type: ignore[override]
        return self.batches.progress()

    def weights(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.sampler.weights(batch[-1])

    def extra(self) -> dict[str, Any]:
        return {"samples_loaded": self.batches.loaded, "decision_seconds": self.batches.decision_seconds}


class NoScoring(PruneProbe):
    """A pruning run without SBLoader: nothing is scored."""

    def scored(self) -> int:
        return 0

    def reused(self) -> int:
        return 0
