"""The contract every domain meets, and what it hands the lab: :class:`Domain`, :class:`Data`, :class:`Metric`.

A domain is one module under ``benchmarks/domains/`` holding one :class:`Domain`: its data at a size and seed, its model
families and the user's recipe for each, its metric, and how a batch is made, trained and scored. Recipes read a domain
through this contract alone, so adding a dataset touches its module and a suite's entry, nothing else
(``benchmarks/README.md``, "Adding a domain").
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Metric:
    """A domain's test metric.

    Attributes:
        prefix: a record's keys are ``<prefix>_<test set>`` (``acc_mix``, ``nats_new``, ...).
        higher: True where higher is better (accuracy), False where lower is (nats per byte).
        label: its name in sentences and plots.
        unit: its unit in table headers (``"%"`` or ``"nats/byte"``).
    """

    prefix: str
    higher: bool
    label: str
    unit: str

    @property
    def key(self) -> str:
        """The key the frontier reads: the mix test set's."""
        return f"{self.prefix}_mix"

    def signed(self, value: float) -> float:
        """The value with higher always better."""
        return value if self.higher else -value

    def cell(self, value: float | None) -> str:
        """The value in a cell whose header names the unit (``93.47``, ``1.2345``); empty for None."""
        if value is None:
            return ""
        return f"{100 * value:.2f}" if self.higher else f"{value:.4f}"

    def show(self, value: float | None) -> str:
        """The value with its unit (``93.47%``, ``1.2345``); empty for None."""
        return self.cell(value) + ("%" if self.higher and value is not None else "")


ACCURACY = Metric("acc", True, "accuracy", "%")
NATS = Metric("nats", False, "nats per byte", "nats/byte")


@dataclass
class Data:
    """A domain's data for one suite.

    Attributes:
        train: the training fields, aligned on dim 0; :meth:`Domain.batch` makes a batch of them.
        tests: test sets by name (each a tuple of fields); ``"mix"`` is the one the frontier reads, ``"new"`` and
            ``"old"`` a continued suite's domains.
        pretrain: a continued suite's pretraining set (fields), or None from scratch.
        id_map: for each pretraining sample, its index in ``train`` (-1: not in it): the warm cache's ``id_map``.
        holdout: the irreducible model's data (``ReducibleSelect``), or None.
        description: what the data is, for ``machine.json`` (sizes, files, label noise).
        pretrained_dir: where the continued suite's pretrained states are saved (``seed<N>.pt``).
    """

    train: tuple[torch.Tensor, ...]
    tests: dict[str, tuple[torch.Tensor, ...]]
    pretrain: tuple[torch.Tensor, ...] | None = None
    id_map: torch.Tensor | None = None
    holdout: tuple[torch.Tensor, ...] | None = None
    description: dict[str, Any] = field(default_factory=dict)
    pretrained_dir: Path | None = None

    @property
    def size(self) -> int:
        return len(self.train[0])

    def pretrained(self, seed: int) -> dict[str, Any]:
        """The seed's pretrained model and cache states (the ``pretrain`` stage's file)."""
        if self.pretrained_dir is None:
            raise ValueError("this suite's data has no pretrained_dir: it is not a continued suite")
        path = self.pretrained_dir / f"seed{seed}.pt"
        if not path.exists():
            raise SystemExit(f"no pretrained model at {path}: run the suite's pretrain stage first "
                             "(`python -m benchmarks frontier SUITE --stage pretrain`)")  # fmt: skip
        return torch.load(path, weights_only=True)


Recipe = Mapping[str, Any]  # the user's recipe: "lr", "weight_decay", "batch" (and "betas" where not AdamW's own)


class Domain(abc.ABC):
    """One dataset and its models, as every recipe reads them.

    Attributes:
        name: the domain's key in ``benchmarks.domains.DOMAINS`` and in a suite's ``domain=``.
        kind: ``"synthetic"`` or ``"real"``: said beside every figure a user reads.
        metric: the test metric.
        families: model constructors by family name (each draws its initialisation from the global RNG).
        recipes: the user's recipe by family (AdamW, one-cycle over the run's loader batches).
        id_key: where a batch made with ``ids=True`` carries its samples' indices (sbdata's ``id_key=``).
    """

    name: str
    kind: str
    metric: Metric
    families: Mapping[str, Callable[[], nn.Module]]
    recipes: Mapping[str, Recipe]
    id_key: int | str = -1

    @abc.abstractmethod
    def data(self, *, smoke: bool, pretrained_dir: Path | None = None, root: Path | None = None, **spec: Any) -> Data:
        """The suite's data (small with ``smoke``); ``spec``: the suite's ``data=`` entry (sizes, label noise,
        ``continued``); ``root``: where the domain's files are, where it reads files (``--data``); ``pretrained_dir``:
        a continued suite's folder of pretrained states."""

    @abc.abstractmethod
    def batch(self, fields: tuple[torch.Tensor, ...], index: torch.Tensor, ids: bool) -> Any:
        """The batch of ``fields`` at ``index``; with ``ids``, carrying ``index`` at :attr:`id_key`."""

    @abc.abstractmethod
    def loss(self, model: nn.Module, batch: Any, reduction: str = "none") -> torch.Tensor:
        """The training loss of a batch: per sample (B,) with ``"none"``, else its ``reduction``."""

    @abc.abstractmethod
    def sb_options(self) -> dict[str, Any]:
        """What ``SBLoader`` needs to score this domain's batches: ``loss_fn`` and ``split`` (and ``forward`` /
        ``reduce`` where the loss is not one call)."""

    @abc.abstractmethod
    def evaluate(self, model: nn.Module, data: Data) -> dict[str, float]:
        """The metric on every test set, ``{f"{prefix}_{name}": value}`` (eval mode; the model's mode restored)."""

    @abc.abstractmethod
    def tiny(self) -> nn.Module:
        """A model of this domain's input and output shapes that does almost nothing (the price table's own-work
        part: sbdata's work in a step without the model's)."""

    def optimizer(self, model: nn.Module, recipe: Recipe, lr: float) -> torch.optim.Optimizer:
        """The recipe's optimizer at ``lr``: AdamW with its weight decay (and betas)."""
        betas = tuple(recipe.get("betas", (0.9, 0.999)))
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=recipe["weight_decay"], betas=betas)  # type: ignore[arg-type]

    def pretraining(self, family: str) -> dict[str, Any]:
        """How a continued suite pretrains ``family``: ``batch``, ``lr``, ``epochs`` (default: the recipe's batch
        and LR, 10 epochs)."""
        recipe = self.recipes[family]
        return {"batch": recipe["batch"], "lr": recipe["lr"], "epochs": 10}

    def model(self, family: str) -> nn.Module:
        """A new model of ``family``, its initialisation drawn from the global RNG."""
        if family not in self.families:
            raise ValueError(f"domain {self.name!r} has no family {family!r}: one of {sorted(self.families)}")
        return self.families[family]()


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 2048) -> float:
    """Top-1 accuracy in eval mode (the model's mode restored)."""
    was_training = model.training
    model.eval()
    correct = sum(int((model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum()) for i in range(0, len(x), batch))
    model.train(was_training)
    return correct / len(x)


def inputs_targets(batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """sbdata's ``split=`` for tuple batches: inputs and labels; the fields after them (ids) ride along unscored."""
    return batch[0], batch[1]


class Classification(Domain):
    """A classification domain of ``(x, y)`` tensors: tuple batches (ids last), cross-entropy, accuracy on every test
    set."""

    metric = ACCURACY
    id_key = -1

    def batch(self, fields: tuple[torch.Tensor, ...], index: torch.Tensor, ids: bool) -> Any:
        return (*(t[index] for t in fields), index) if ids else tuple(t[index] for t in fields)

    def loss(self, model: nn.Module, batch: Any, reduction: str = "none") -> torch.Tensor:
        return F.cross_entropy(model(batch[0]), batch[1], reduction=reduction)

    def sb_options(self) -> dict[str, Any]:
        return {"loss_fn": F.cross_entropy, "split": inputs_targets}

    def evaluate(self, model: nn.Module, data: Data) -> dict[str, float]:
        return {f"acc_{name}": accuracy(model, *fields) for name, fields in data.tests.items()}
