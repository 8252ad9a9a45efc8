"""The frontier suites' data: MNIST-1D from scratch, and the continued-training mix with its pretraining.

:func:`scratch`: the cached MNIST-1D 20k split as :class:`Mix` with only the mix test set. :func:`mix` (:class:`Sizes`
for the numbers): the pretraining set, the continued mix of replayed, fresh and time-reversed (``x.flip(-1)``) samples,
and its mix, new and old test sets. :func:`pretrain` (not timed; ``torch.manual_seed(1000 + seed)``): the suite's
recipe on the pretraining set, its step feeding a dense ``LossCache`` that the warm-cache arms carry into the new run
(``warm_start(state, id_map=...)``). The suite's design: ``benchmarks/frontier/README.md``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness._sb import LossCache
from benchmarks.harness.data import NOISE_SEED, Data, ShuffledBatches, flip_labels, mnist1d
from benchmarks.harness.models import MODELS, RECIPES, accuracy
from benchmarks.harness.train import fit, user_optimizer

PRETRAIN_EPOCHS = 10


@dataclass(frozen=True)
class Sizes:
    """How many samples each part of the suite takes (see the module docstring)."""

    source: int = 20_000  # the cached MNIST-1D split it is cut from (80% training)
    pretrain: int = 8_000
    fresh: int = 4_000
    new: int = 3_000
    test_old: int = 4_000
    test_mix_new: int = 1_000  # reversed test samples in the mix test set (80/20 with test_old)

    @property
    def mix(self) -> int:
        return self.pretrain + self.fresh + self.new

    @property
    def familiar(self) -> float:
        """Share of the mix from the old domain (replayed or fresh)."""
        return (self.pretrain + self.fresh) / self.mix

    @property
    def known(self) -> float:
        """Share of the mix the pretraining saw (and the warm cache knows)."""
        return self.pretrain / self.mix


SMOKE_SIZES = Sizes(source=2_000, pretrain=600, fresh=300, new=225, test_old=400, test_mix_new=100)


def load_pretrained(directory: Path | None, seed: int, suite: str) -> dict[str, Any]:
    """A continued suite's pretrained states for ``seed``: the file its ``pretrain`` stage saved in ``directory``."""
    if directory is None:
        raise ValueError(f"the {suite} suite's data has no pretrained_dir: build it with its pretrained_dir")
    path = directory / f"seed{seed}.pt"
    if not path.exists():
        raise SystemExit(f"no pretrained model at {path}: run `python -m benchmarks frontier pretrain {suite}` first")
    return torch.load(path, weights_only=True)


def reverse(x: torch.Tensor) -> torch.Tensor:
    """Domain B: the signal reversed in time."""
    return x.flip(-1).contiguous()


@dataclass
class Mix(Data):
    """The continued mix as the harness's ``Data`` (its test set the mix test set), plus the pretraining set, the
    separate test sets and the per-seed pretrained states."""

    x_pre: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    y_pre: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    x_old: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    y_old: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    x_new: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    y_new: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    sizes: Sizes = field(default_factory=Sizes)
    pretrained_dir: Path | None = None

    def pretrained(self, seed: int) -> dict[str, Any]:
        """The seed's pretrained model and cache states (from :func:`pretrain`'s file)."""
        return load_pretrained(self.pretrained_dir, seed, "continued")

    def id_map(self) -> torch.Tensor:
        """For each id of the pretraining cache, its id in the mix (the replayed samples come first)."""
        return torch.arange(self.sizes.pretrain)


def scratch(samples: int = 20_000, noise: float = 0.0) -> Mix:
    """MNIST-1D (``samples``, 80/20) for a run from scratch: the test set is the mix test set; ``noise`` of the
    training labels flipped (the harness's fixed pattern, the same for every arm and seed; the test labels clean)."""
    split = mnist1d(samples)
    y_train = split.y_train if not noise else flip_labels(split.y_train, noise, NOISE_SEED)[0]
    return Mix(split.x_train, y_train, split.x_test, split.y_test)


def mix(sizes: Sizes = Sizes(), pretrained_dir: Path | None = None) -> Mix:
    """The suite's data (see the module docstring)."""
    split = mnist1d(sizes.source)
    s = sizes
    a_pre, a_fresh = slice(0, s.pretrain), slice(s.pretrain, s.pretrain + s.fresh)
    b_new = slice(s.pretrain + s.fresh, s.mix)
    if s.mix > len(split.y_train) or s.test_old > len(split.y_test):
        raise ValueError(f"{s} needs more samples than MNIST-1D {s.source} has")
    x_train = torch.cat([split.x_train[a_pre], split.x_train[a_fresh], reverse(split.x_train[b_new])])
    y_train = torch.cat([split.y_train[a_pre], split.y_train[a_fresh], split.y_train[b_new]])
    x_old, y_old = split.x_test[: s.test_old], split.y_test[: s.test_old]
    x_new, y_new = reverse(x_old), y_old
    x_test = torch.cat([x_old, x_new[: s.test_mix_new]])
    y_test = torch.cat([y_old, y_new[: s.test_mix_new]])
    return Mix(
        x_train, y_train, x_test, y_test,
        x_pre=split.x_train[a_pre], y_pre=split.y_train[a_pre], x_old=x_old, y_old=y_old, x_new=x_new, y_new=y_new,
        sizes=sizes, pretrained_dir=pretrained_dir,
    )  # fmt: skip


def domains(model: torch.nn.Module, data: Mix) -> dict[str, float]:
    """The model's accuracy on the mix, new-domain and old-domain test sets (the mix's only, from scratch)."""
    out = {"acc_mix": accuracy(model, data.x_test, data.y_test)}
    if len(data.y_new):
        out.update(acc_new=accuracy(model, data.x_new, data.y_new), acc_old=accuracy(model, data.x_old, data.y_old))
    return out


def pretrain(data: Mix, seed: int, family: str, epochs: int = PRETRAIN_EPOCHS) -> dict[str, Any]:
    """Pretrain the seed's model on the pretraining set (the family's recipe, a dense cache observing the training
    step's losses); returns the states to save and the pretrained model's accuracies."""
    torch.manual_seed(1000 + seed)
    model = MODELS[family]()
    n = len(data.y_pre)
    cache = LossCache(size=n)
    batches = ShuffledBatches((data.x_pre, data.y_pre, torch.arange(n)), int(RECIPES[family]["batch"]), 1000 + seed)
    observe = lambda batch, losses, epoch: cache.observe(batch[-1], losses, epoch)  # noqa: E731
    fit(model, user_optimizer(RECIPES[family])(model), batches, epochs, RECIPES[family]["lr"], observe=observe)
    return {"model": model.state_dict(), "cache": cache.state_dict(), "seed": seed, "epochs": epochs,
            **{f"pretrained_{k}": v for k, v in domains(model, data).items()}}  # fmt: skip
