"""Fashion-MNIST (real images): 28x28 greyscale photographs of ten kinds of clothing, 60,000 training and 10,000 test.

Data: the dataset's four IDX files (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, gzipped or not), read from the first of: ``--data DIR``; the
folder in the environment variable :data:`ENV`; the Debian package ``dataset-fashion-mnist``'s folder; torchvision's
``FashionMNIST(root="data")`` folder (``data/FashionMNIST/raw``). Nothing is downloaded. A suite trains on
``samples`` of the training images (a fixed draw) and tests on all 10,000; pixels are scaled to [0, 1] and
standardised by the training set's mean and sd.

Family ``cnn``: three 3x3 convolutions (16, 32, 64 channels; ReLU; max-pooling after the first two; global average
pooling) and a linear head, in the channels-last memory layout (in the default layout max-pooling dominates a step and
the scoring pass costs over half of one). The user's recipe: AdamW, batch 256, LR 3e-3, weight decay 1e-4, one-cycle.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from benchmarks.lab.domain import Classification, Data

ENV = "SBDATA_FASHION_MNIST"
FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
DEBIAN = Path("/usr/share/datasets/fashion-mnist")
TORCHVISION = Path("data/FashionMNIST/raw")
DRAW_SEED = 7  # the fixed draw of a suite's training images
IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    """One IDX file (gzipped if its name ends in ``.gz``) as an array of its shape and type.

    Raises:
        ValueError: a file that is not IDX (naming the file and what its header says).
    """
    raw = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_TYPES:
        raise ValueError(f"{path} is not an IDX file (its first bytes are {raw[:4]!r}, not 00 00 TYPE DIMS)")
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    values = np.frombuffer(raw, dtype=IDX_TYPES[raw[2]], offset=4 + 4 * dims)
    if values.size != int(np.prod(shape)):
        raise ValueError(f"{path}: its header says shape {shape} but it holds {values.size} values")
    return values.reshape(shape)


def locate(root: Path | None) -> Path:
    """The folder holding the four files: ``root``, else :data:`ENV`'s, else Debian's, else torchvision's.

    Raises:
        SystemExit: none of them holds the four files, naming the three ways to give them.
    """
    tried = [root] if root is not None else []
    tried += [Path(os.environ[ENV])] if os.environ.get(ENV) else []
    tried += [] if root is not None else [DEBIAN, TORCHVISION]
    for folder in tried:
        if all(_file(folder, name) is not None for name in FILES.values()):
            return folder
    raise SystemExit(
        "Fashion-MNIST's four IDX files ("
        + ", ".join(FILES.values())
        + ", each gzipped or not) were not found in "
        + ", ".join(str(p) for p in tried)
        + ": pass --data DIR, or set "
        + ENV
        + "=DIR, or install them "
        "(Debian: apt-get install dataset-fashion-mnist; torchvision: FashionMNIST(root='data', download=True) once)"
    )


def _file(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.exists():
            return candidate
    return None


def load(root: Path | None = None) -> dict[str, torch.Tensor]:
    """The four arrays as tensors (images uint8 (N, 28, 28), labels int64), from :func:`locate`'s folder."""
    folder = locate(root)
    arrays = {key: read_idx(_file(folder, name)) for key, name in FILES.items()}  # type: ignore[arg-type]
    out = {key: torch.from_numpy(np.array(value)) for key, value in arrays.items()}
    for key in ("y_train", "y_test"):
        out[key] = out[key].long()
    if len(out["x_train"]) != len(out["y_train"]) or len(out["x_test"]) != len(out["y_test"]):
        raise ValueError(f"{folder}: the images and labels files hold different counts")
    return out


class CNN(nn.Module):
    """Three 3x3 convolutions and a linear head, channels-last (about 24k parameters at width 16)."""

    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 4 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )  # fmt: skip
        self.head = nn.Linear(4 * width, classes)
        self.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class FashionMNIST(Classification):
    name = "fashion_mnist"
    kind = "real"
    families: ClassVar[dict[str, Callable[[], nn.Module]]] = {"cnn": CNN}
    recipes: ClassVar[dict[str, dict[str, Any]]] = {"cnn": {"lr": 3e-3, "weight_decay": 1e-4, "batch": 256}}

    def data(self, *, smoke: bool, pretrained_dir: Path | None = None, root: Path | None = None,
             samples: int = 60_000) -> Data:  # fmt: skip
        arrays = load(root)
        draw = torch.randperm(len(arrays["y_train"]), generator=torch.Generator().manual_seed(DRAW_SEED))
        pick = draw[: 2_000 if smoke else samples]
        test = slice(0, 1_000 if smoke else None)
        x = arrays["x_train"][pick].float().div_(255)
        mean, sd = x.mean().item(), x.std().item()

        def images(raw: torch.Tensor) -> torch.Tensor:
            return raw.float().div_(255).sub_(mean).div_(sd).unsqueeze(1).contiguous()

        tests = {"mix": (images(arrays["x_test"][test]), arrays["y_test"][test])}
        return Data((images(arrays["x_train"][pick]), arrays["y_train"][pick]), tests,
                    description={"samples": len(pick), "test": len(tests["mix"][1]), "mean": mean,
                                 "sd": sd})  # fmt: skip

    def tiny(self) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))


DOMAIN = FashionMNIST()
