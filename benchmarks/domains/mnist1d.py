"""MNIST-1D (synthetic): 40-sample 1-D signals of ten digits, generated offline by the ``mnist1d`` package.

Data: the package's generator at seed 42, 80/20 train/test, cached in ``benchmarks/.cache/``. From scratch
(``samples``, ``noise``: that share of the training labels flipped in a fixed pattern, the test labels clean), or the
continued mix (``continued=True``, :class:`Sizes`): a pretraining set, then the mix of replayed, fresh and
time-reversed (``x.flip(-1)``, the new domain) samples, with mix, new and old test sets. Families: the ConvNet with
BatchNorm at width 32 (``cnn``) and 64 (``cnn64``, where a step on 64 samples costs about a third of one on 256), and
an MLP (``mlp``); the user's recipe: AdamW, batch 256, one-cycle.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from benchmarks.lab.domain import Classification, Data

CACHE = Path(__file__).resolve().parents[1] / ".cache"
NOISE_SEED = 123  # the flipped labels' pattern: the same for every arm and seed


class ConvNet(nn.Module):
    """A small 1-D CNN with BatchNorm (width 32: about 10k parameters; 64: about 32k)."""

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


def mlp(hidden: int = 256, classes: int = 10) -> nn.Module:
    """A two-hidden-layer MLP."""
    return nn.Sequential(nn.Flatten(), nn.Linear(40, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))  # fmt: skip


@dataclass(frozen=True)
class Sizes:
    """How many samples each part of the continued suite takes."""

    source: int = 20_000  # the generated split it is cut from (80% training)
    pretrain: int = 8_000
    fresh: int = 4_000
    new: int = 3_000
    test_old: int = 4_000
    test_mix_new: int = 1_000  # reversed test samples in the mix test set (80/20 with test_old)

    @property
    def mix(self) -> int:
        return self.pretrain + self.fresh + self.new


SMOKE_SIZES = Sizes(source=2_000, pretrain=600, fresh=300, new=225, test_old=400, test_mix_new=100)


def generated(samples: int, cache: Path | None = CACHE) -> dict[str, torch.Tensor]:
    """MNIST-1D at ``samples`` (``x``, ``y``, ``x_test``, ``y_test``), cached as ``.npz`` (generating takes about
    24 s). The package reseeds Python's and numpy's global RNGs; their states are restored."""
    path = None if cache is None else cache / f"mnist1d_{samples}_seed42.npz"
    keys = ("x_train", "y_train", "x_test", "y_test")
    if path is not None and path.exists():
        with np.load(path) as z:
            return {k: torch.from_numpy(z[k]) for k in keys}
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples, args.seed = samples, 42
    states = random.getstate(), np.random.get_state()
    try:
        made = make_dataset(args)
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
    out = {
        "x_train": torch.from_numpy(np.asarray(made["x"], dtype=np.float32)).unsqueeze(1),
        "y_train": torch.from_numpy(np.asarray(made["y"], dtype=np.int64)),
        "x_test": torch.from_numpy(np.asarray(made["x_test"], dtype=np.float32)).unsqueeze(1),
        "y_test": torch.from_numpy(np.asarray(made["y_test"], dtype=np.int64)),
    }
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **{k: v.numpy() for k, v in out.items()})
    return out


def flip_labels(y: torch.Tensor, fraction: float, seed: int = NOISE_SEED, classes: int = 10) -> torch.Tensor:
    """``fraction`` of the labels replaced by another class, drawn uniformly, in a pattern fixed by ``seed``."""
    g = torch.Generator().manual_seed(seed)
    flipped = torch.rand(len(y), generator=g) < fraction
    shift = torch.randint(1, classes, (len(y),), generator=g)
    return torch.where(flipped, (y + shift) % classes, y)


def reverse(x: torch.Tensor) -> torch.Tensor:
    """The new domain: the signal reversed in time."""
    return x.flip(-1).contiguous()


class MNIST1D(Classification):
    name = "mnist1d"
    kind = "synthetic"
    families: ClassVar[dict[str, Callable[[], nn.Module]]] = {"cnn": ConvNet, "cnn64": lambda: ConvNet(64), "mlp": mlp}
    recipes: ClassVar[dict[str, dict[str, Any]]] = {
        "cnn": {"lr": 3e-3, "weight_decay": 1e-4, "batch": 256},
        "cnn64": {"lr": 3e-3, "weight_decay": 1e-4, "batch": 256},
        "mlp": {"lr": 2e-3, "weight_decay": 1e-4, "batch": 256},
    }

    def data(self, *, smoke: bool, pretrained_dir: Path | None = None, root: Path | None = None, samples: int = 20_000,
             noise: float = 0.0, continued: bool = False) -> Data:  # fmt: skip
        if continued:
            return mix(SMOKE_SIZES if smoke else Sizes(), pretrained_dir)
        made = generated(2_000 if smoke else samples)
        y = flip_labels(made["y_train"], noise) if noise else made["y_train"]
        return Data((made["x_train"], y), {"mix": (made["x_test"], made["y_test"])},
                    description={"samples": len(y), "noise": noise})  # fmt: skip

    def tiny(self) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(40, 10))


def mix(sizes: Sizes, pretrained_dir: Path | None) -> Data:
    """The continued suite's data (the module docstring; the replayed samples come first in the mix)."""
    made, s = generated(sizes.source), sizes
    x, y, xt, yt = made["x_train"], made["y_train"], made["x_test"], made["y_test"]
    if s.mix > len(y) or s.test_old > len(yt):
        raise ValueError(f"{s} needs more samples than MNIST-1D {s.source} has")
    pre, fresh, new = slice(0, s.pretrain), slice(s.pretrain, s.pretrain + s.fresh), slice(s.pretrain + s.fresh, s.mix)
    x_train = torch.cat([x[pre], x[fresh], reverse(x[new])])
    y_train = torch.cat([y[pre], y[fresh], y[new]])
    x_old, y_old = xt[: s.test_old], yt[: s.test_old]
    x_new = reverse(x_old)
    tests = {"mix": (torch.cat([x_old, x_new[: s.test_mix_new]]), torch.cat([y_old, y_old[: s.test_mix_new]])),
             "new": (x_new, y_old), "old": (x_old, y_old)}  # fmt: skip
    return Data((x_train, y_train), tests, pretrain=(x[pre], y[pre]), id_map=torch.arange(s.pretrain),
                description={"sizes": vars(s), "new_share": s.new / s.mix}, pretrained_dir=pretrained_dir)  # fmt: skip


DOMAIN = MNIST1D()
