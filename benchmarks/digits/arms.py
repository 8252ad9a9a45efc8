"""The digits suite's data, model and arms: scikit-learn's ``load_digits`` (1,797 8x8 images, offline), a small CNN
with BatchNorm and dropout, and the arms as data.

Every arm trains the user's recipe (AdamW, lr 1e-3, default weight decay, constant LR) at batch 128 unless it says
otherwise; selection arms wrap the harness's seeded batches in ``SBLoader(train_loader, model, F.cross_entropy,
keep=..., policy=...)`` in the shrink layout (each SB batch trains ``ceil(keep * 128)`` of its 128).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness._sb import SBLoader, auto_decisions, keep_count
from benchmarks.harness.arms import OwnRecipe, Probe
from benchmarks.harness.data import Data, ShuffledBatches

BATCH, LR = 128, 1e-3
RECIPE = {"batch": BATCH, "lr": LR, "weight_decay": 0.01}  # AdamW's default weight decay
KEEP = 0.25


def digits() -> Data:
    """``load_digits`` scaled to [0, 1] as (N, 1, 8, 8), split 80/20 stratified (``random_state=0``)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, stratify=y, test_size=0.2, random_state=0)

    def images(a: Any) -> torch.Tensor:
        return torch.as_tensor(a, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0  # pixels are 0..16

    def labels(a: Any) -> torch.Tensor:
        return torch.as_tensor(a, dtype=torch.int64)

    return Data(images(x_train), labels(y_train), images(x_test), labels(y_test))


def model() -> nn.Module:
    """conv 1->16 3x3, BN, ReLU, conv 16->32 3x3, BN, ReLU, 2x2 max-pool, dropout 0.25, linear to 10."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 10),
    )


@dataclass(frozen=True)
class DigitsArm(OwnRecipe):
    """One arm: plain training at ``batch`` (``policy=None``), or ``SBLoader`` with ``keep`` and ``policy``.

    Attributes:
        name: label in tables.
        batch: loader batch size.
        lr: AdamW's (constant) LR.
        policy: None (plain), or an sbdata policy name; ``"default"`` passes no ``policy=`` (sbdata's default).
        keep: the share kept per SB batch, or ``"auto"`` (every other option at its default).
        seeded: pass ``generator=seed`` (the random policy's draws differ per seed; else sbdata seeds 0).
    """

    name: str
    batch: int = BATCH
    lr: float = LR
    policy: str | None = None
    keep: float | str = 1.0
    seeded: bool = False

    def build(self, model, split, *, family: str, batch: int, epochs: int, seed: int) -> tuple[Any, Probe]:
        source = ShuffledBatches(split.fields(), self.batch, seed)
        if self.policy is None:
            return source, Probe(len(source))
        options: dict[str, Any] = {"keep": self.keep}
        if self.policy != "default":
            options["policy"] = self.policy
        if self.seeded:
            options["generator"] = seed
        loader = SBLoader(source, model, F.cross_entropy, **options)
        probe = Probe(len(source), loader)
        if self.keep == "auto":
            probe.extra = lambda: {"auto": auto_decisions(loader.stats)}  # type: ignore[attr-defined]
        return loader, probe


def arms() -> list[DigitsArm]:
    """The user's recipe, top-k at 0.25 and 0.5, random at 0.25, the small-batch control (plain at
    ``ceil(0.25 * 128) = 32``, same epochs and LR) and ``keep="auto"`` with every default. (The ``start-on`` record's
    ``auto-start-on`` arm ran ``Auto(start_on=True)``, an option of 61e5216 removed after it.)"""
    return [
        DigitsArm("user"),
        DigitsArm("topk-0.25", policy="topk", keep=KEEP),
        DigitsArm("topk-0.5", policy="topk", keep=0.5),
        DigitsArm("random-0.25", policy="random", keep=KEEP, seeded=True),
        DigitsArm("small-batch", batch=keep_count(KEEP, BATCH)),
        DigitsArm("auto", policy="default", keep="auto"),
    ]
