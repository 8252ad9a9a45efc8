"""The data pipeline's side of pruning: a map-style dataset that decodes each sample, loaded with DataLoader workers.

Each sample is stored zlib-compressed (as an image or audio record would be) and decoded in ``__getitem__``; one
epoch is loaded through ``DataLoader(num_workers=2)`` with the full data and with a ``PruningSampler`` whose cache
holds losses from a skewed (exponential) distribution, as training losses are. Reports samples loaded and seconds per
epoch for both, interleaved over a few rounds (medians).
"""

from __future__ import annotations

import statistics
import time
import zlib
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from benchmarks.harness._sb import LossCache, PruningSampler, with_index


class Compressed(Dataset):
    """``n`` samples of ``length`` float32 values, each stored compressed and decoded on access."""

    def __init__(self, n: int, length: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.records = [zlib.compress(rng.normal(size=length).astype(np.float32).round(2).tobytes()) for _ in range(n)]
        self.labels = rng.integers(0, 10, size=n)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        values = np.frombuffer(zlib.decompress(self.records[index]), dtype=np.float32)
        return torch.from_numpy(values.copy()), int(self.labels[index])


def loading(n: int = 20_000, length: int = 4096, rounds: int = 3, workers: int = 2) -> dict[str, Any]:
    dataset = Compressed(n, length)
    cache = LossCache(size=n)
    cache.observe(torch.arange(n), torch.empty(n).exponential_(generator=torch.Generator().manual_seed(0)), 0)
    pruned = PruningSampler(dataset, cache, epochs=100, seed=0)
    full = PruningSampler(dataset, cache, epochs=100, prune=0.0, seed=0)
    seconds: dict[str, list[float]] = {"full": [], "pruned": []}
    loaded: dict[str, int] = {}
    for round_ in range(rounds):
        for name, sampler in (("full", full), ("pruned", pruned))[:: 1 if round_ % 2 == 0 else -1]:
            sampler.set_epoch(round_ + 1)
            loader = DataLoader(with_index(dataset), batch_size=128, sampler=sampler, num_workers=workers)
            started, count = time.perf_counter(), 0
            for _, _, index in loader:
                count += len(index)
            seconds[name].append(time.perf_counter() - started)
            loaded[name] = count
    out = {name: {"samples_loaded": loaded[name], "seconds": statistics.median(s)} for name, s in seconds.items()}
    out["config"] = {"samples": n, "values_per_sample": length, "num_workers": workers, "rounds": rounds}
    return out
