"""Data and models the examples share: MNIST-1D, generated offline, and four small models (the benchmarks keep their
own MNIST-1D data and models in benchmarks/domains/mnist1d.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass
class Split:
    """MNIST-1D as tensors: train and test inputs (N, 1, 40) float32 and labels (N,) int64."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def load_mnist1d(num_samples: int = 5000, seed: int = 42) -> Split:
    """Generate MNIST-1D offline with the ``mnist1d`` package (80/20 train/test split).

    ``mnist1d`` reseeds Python's and numpy's global RNGs while it generates; their states are restored here, so
    calling this never changes a caller's random streams.

    Args:
        num_samples: samples in total, train and test; a multiple of 10. Default 5000.
        seed: the generator's seed. Default 42 (the package's own).
    """
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError as error:
        raise SystemExit(f'{error}: MNIST-1D needs the examples extra: pip install -e ".[examples]"') from error

    args = get_dataset_args()
    args.num_samples = num_samples
    args.seed = seed
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        data = make_dataset(args)
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)

    def inputs(key: str) -> torch.Tensor:
        return torch.from_numpy(np.asarray(data[key], dtype=np.float32)).unsqueeze(1)

    def labels(key: str) -> torch.Tensor:
        return torch.from_numpy(np.asarray(data[key], dtype=np.int64))

    return Split(inputs("x"), labels("y"), inputs("x_test"), labels("y_test"))


class ConvNet(nn.Module):
    """A small 1-D CNN for MNIST-1D with BatchNorm (about 25k parameters)."""

    def __init__(self, width: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, width, 5, padding=2),
            nn.BatchNorm1d(width),
            nn.ReLU(),
            nn.Conv1d(width, width, 3, stride=2, padding=1),
            nn.BatchNorm1d(width),
            nn.ReLU(),
            nn.Conv1d(width, width, 3, stride=2, padding=1),
            nn.BatchNorm1d(width),
            nn.ReLU(),
        )
        self.head = nn.Linear(width * 10, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class WideConvNet(ConvNet):
    """The ConvNet at width 64 (about 32k parameters): compute-bound, a training step on 64 samples costs about a
    third of one on 256, so training on the kept quarter of a batch saves time (the frontier benchmark's
    ``scratch-wide`` model)."""

    def __init__(self, width: int = 64, classes: int = 10) -> None:
        super().__init__(width, classes)


class MLP(nn.Module):
    """A two-hidden-layer MLP for MNIST-1D."""

    def __init__(self, hidden: int = 256, classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(40, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class GRUNet(nn.Module):
    """A small GRU reading MNIST-1D as a sequence of 40 scalars."""

    def __init__(self, hidden: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, last = self.gru(x.transpose(1, 2))
        return self.head(last[-1])


MODELS = {"cnn": ConvNet, "cnn64": WideConvNet, "mlp": MLP, "gru": GRUNet}


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 2048) -> float:
    """Top-1 accuracy in eval mode (the model's mode is restored)."""
    was_training = model.training
    model.eval()
    correct = sum(int((model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum()) for i in range(0, len(x), batch))
    model.train(was_training)
    return correct / len(x)
