"""scikit-learn's digits (real images, tiny): 1,797 8x8 greyscale handwritten digits, bundled with scikit-learn.

A suite nobody tuned on: an 80/20 stratified split (``random_state=0``), pixels scaled to [0, 1]; family ``cnn``:
two 3x3 convolutions with BatchNorm, max-pooling, dropout 0.25 and a linear head; the user's recipe: AdamW at LR 1e-3
(its default weight decay, 0.01), batch 128, no LR schedule. Needs scikit-learn (the ``bench`` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from benchmarks.lab.domain import Classification, Data


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.25), nn.Flatten(), nn.Linear(32 * 4 * 4, 10),
    )  # fmt: skip


class Digits(Classification):
    name = "digits"
    kind = "real"
    families: ClassVar[dict[str, Callable[[], nn.Module]]] = {"cnn": cnn}
    recipes: ClassVar[dict[str, dict[str, Any]]] = {
        "cnn": {"lr": 1e-3, "weight_decay": 0.01, "batch": 128, "schedule": "constant"}
    }

    def data(self, *, smoke: bool, pretrained_dir: Path | None = None, root: Path | None = None) -> Data:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        x, y = load_digits(return_X_y=True)
        x_train, x_test, y_train, y_test = train_test_split(x, y, stratify=y, test_size=0.2, random_state=0)

        def images(a: Any) -> torch.Tensor:
            return torch.as_tensor(a, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0  # pixels are 0..16

        tests = {"mix": (images(x_test), torch.as_tensor(y_test, dtype=torch.int64))}
        return Data((images(x_train), torch.as_tensor(y_train, dtype=torch.int64)), tests,
                    description={"samples": len(y_train), "test": len(y_test)})  # fmt: skip

    def tiny(self) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


DOMAIN = Digits()
