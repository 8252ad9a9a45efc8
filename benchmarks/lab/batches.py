"""A domain's loader batches (:class:`Batches`): fields in a fixed permutation per seed and epoch, or a
``PruningSampler``'s order."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from ._sb import PruningSampler
from .domain import Domain


class Batches:
    """A domain's batches of ``fields`` in a permutation fixed by ``(seed, epoch)`` alone (every arm of a seed reads
    the samples in the same order whatever its batch size), or in a ``PruningSampler``'s order.

    Attributes:
        full: loader batches of a whole epoch (what the LR schedule counts, whatever a sampler prunes).
        loaded: samples loaded per epoch (with a sampler).
    """

    def __init__(self, domain: Domain, fields: tuple[torch.Tensor, ...], batch_size: int, seed: int, *,
                 ids: bool = False, sampler: PruningSampler | None = None) -> None:  # fmt: skip
        self.domain, self.fields, self.batch_size, self.seed = domain, fields, batch_size, seed
        self.ids, self.sampler = ids, sampler
        self.full = math.ceil(len(fields[0]) / batch_size)
        self.epoch, self.yielded, self.epoch_batches = 0, 0, self.full
        self.loaded: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self.sampler is not None:
            self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return self.full if self.sampler is None else math.ceil(len(self.sampler) / self.batch_size)

    def progress(self) -> float:
        """Loader batches taken so far, in whole-epoch batches (the one just taken included)."""
        return self.epoch * self.full + self.yielded * self.full / self.epoch_batches

    def __iter__(self) -> Iterator[Any]:
        if self.sampler is None:
            generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
            order = torch.randperm(len(self.fields[0]), generator=generator)
        else:
            order = torch.as_tensor(list(self.sampler), dtype=torch.long)
            self.loaded.append(len(order))
        self.epoch_batches, self.yielded = max(1, math.ceil(len(order) / self.batch_size)), 0
        for start in range(0, len(order), self.batch_size):
            index = order[start : start + self.batch_size]
            self.yielded += 1
            yield self.domain.batch(self.fields, index, self.ids)
