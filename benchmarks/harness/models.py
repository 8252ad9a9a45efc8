"""The MNIST-1D model families (``cnn``, ``mlp``, ``gru``), their fixed training recipes, and test accuracy. The
language model (``ByteLM``) is in :mod:`benchmarks.harness.lm`."""

from __future__ import annotations

import torch
from torch import nn


class ConvNet(nn.Module):
    """A small 1-D CNN for MNIST-1D with BatchNorm (width 32: about 10k parameters)."""

    def __init__(self, width: int = 32, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, (kernel, stride) in enumerate(((5, 1), (3, 2), (3, 2))):
            conv = nn.Conv1d(1 if i == 0 else width, width, kernel, stride=stride, padding=kernel // 2)
            layers += [conv, nn.BatchNorm1d(width), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(width * 10, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class MLP(nn.Module):
    """A two-hidden-layer MLP for MNIST-1D."""

    def __init__(self, hidden: int = 256, classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(40, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class GRUNet(nn.Module):
    """A small GRU reading MNIST-1D as a sequence of 40 scalars."""

    def __init__(self, hidden: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gru(x.transpose(1, 2))[1][-1])


class WideConvNet(ConvNet):
    """The ConvNet at width 64 (about 32k parameters): a training step on 64 samples costs about a third of one on
    256, so the kept step shrinks with the batch (the compute-bound suite's model; ``benchmarks/frontier``)."""

    def __init__(self, width: int = 64, classes: int = 10) -> None:
        super().__init__(width, classes)


MODELS = {"cnn": ConvNet, "cnn64": WideConvNet, "mlp": MLP, "gru": GRUNet}
RECIPES = {  # one fixed recipe per model family: AdamW, one-cycle LR keyed to loader progress, batch B
    "cnn": {"lr": 3e-3, "weight_decay": 1e-4, "batch": 256},
    "cnn64": {"lr": 3e-3, "weight_decay": 1e-4, "batch": 256},
    "mlp": {"lr": 2e-3, "weight_decay": 1e-4, "batch": 256},
    "gru": {"lr": 3e-3, "weight_decay": 1e-4, "batch": 256},
}


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 2048) -> float:
    """Top-1 accuracy in eval mode (the model's mode is restored)."""
    was_training = model.training
    model.eval()
    correct = sum(int((model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum()) for i in range(0, len(x), batch))
    model.train(was_training)
    return correct / len(x)
