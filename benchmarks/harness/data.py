"""MNIST-1D for the benchmarks: cached splits, label noise, and a seeded batch iterator every arm shares.

The language-model benchmark's byte corpus is in :mod:`benchmarks.harness.lm`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

CACHE = Path(__file__).resolve().parents[1] / ".cache"


def flip_labels(y: torch.Tensor, fraction: float, seed: int, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace ``fraction`` of the labels by a different class, chosen uniformly; returns (labels, flipped mask)."""
    g = torch.Generator().manual_seed(seed)
    flipped = torch.rand(len(y), generator=g) < fraction
    shift = torch.randint(1, classes, (len(y),), generator=g)
    return torch.where(flipped, (y + shift) % classes, y), flipped


@dataclass
class Data:
    """Training tensors (labels possibly noisy, with the clean ones kept to measure what selection trains on)
    and the clean test set."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    y_clean: torch.Tensor | None = None

    def fields(self, index: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """The training fields a batch carries: (x, y) or (x, y, clean y), optionally at ``index``."""
        out = (self.x_train, self.y_train) if self.y_clean is None else (self.x_train, self.y_train, self.y_clean)
        return out if index is None else tuple(t[index] for t in out)


FIELDS = ("x_train", "y_train", "x_test", "y_test")


def mnist1d(num_samples: int, cache: Path | None = CACHE) -> Data:
    """MNIST-1D (80/20 split, the ``mnist1d`` package's generator at seed 42), cached as ``.npz`` (generation takes
    ~24 s). The package reseeds Python's and numpy's global RNGs; their states are restored."""
    path = None if cache is None else cache / f"mnist1d_{num_samples}_seed42.npz"
    if path is not None and path.exists():
        with np.load(path) as z:
            return Data(*(torch.from_numpy(z[k]) for k in FIELDS))
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples, args.seed = num_samples, 42
    states = random.getstate(), np.random.get_state()
    try:
        made = make_dataset(args)
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
    x = {k: torch.from_numpy(np.asarray(made[k], dtype=np.float32)).unsqueeze(1) for k in ("x", "x_test")}
    y = {k: torch.from_numpy(np.asarray(made[k], dtype=np.int64)) for k in ("y", "y_test")}
    split = Data(x["x"], y["y"], x["x_test"], y["y_test"])
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **{k: getattr(split, k).numpy() for k in FIELDS})
    return split


def inputs_targets(batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """sbdata's ``split=`` for the benchmarks' tuple batches: inputs and labels; the fields after them (a noisy run's
    clean labels, a cache's ids) ride along unscored."""
    return batch[0], batch[1]


NOISE_SEED = 123  # the flipped labels' pattern: the same for every benchmark, arm and seed


def dataset(num_samples: int, noise: float = 0.0, noise_seed: int = NOISE_SEED, cache: Path | None = CACHE) -> Data:
    """MNIST-1D, with ``noise`` of the training labels flipped (a fixed pattern, the same for every arm and seed)."""
    data = mnist1d(num_samples, cache)
    if noise:
        data.y_clean = data.y_train
        data.y_train, _ = flip_labels(data.y_train, noise, noise_seed)
    return data


class ShuffledBatches:
    """Batches of tensors in a permutation fixed by ``(seed, epoch)`` alone, so that every arm sees the samples in
    the same order whatever its batch size. Cheaper than a ``DataLoader`` over a ``TensorDataset``.
    """

    def __init__(self, tensors: tuple[torch.Tensor, ...], batch_size: int, seed: int) -> None:
        self.tensors, self.batch_size, self.seed, self.epoch = tensors, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(len(self.tensors[0]) / self.batch_size)

    def __iter__(self):
        n = len(self.tensors[0])
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 100_003 + self.epoch))
        for i in range(0, n, self.batch_size):
            idx = perm[i : i + self.batch_size]
            yield tuple(t[idx] for t in self.tensors)
