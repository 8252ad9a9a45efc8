"""Arms of the language-model benchmark: the plain baseline at any (batch, LR), sbdata's selection in both layouts,
its controls, the loss cache with ``observe()``, ``ReducibleSelect`` and ``PruningSampler``.

Every arm trains the same :class:`~benchmarks.harness.lm.ByteLM` on dict batches ``{"input_ids": (B, T) long,
"ids": (B,) long}`` (ids index the regime's pool of chunks), with per-sequence losses from
``sbdata.tasks.causal_lm()``; the *shrink* and *fixed* layouts are the MNIST-1D arms' (``harness/arms.py``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from ._sb import Auto, LossCache, PruningSampler, ReducibleSelect, SBLoader, causal_lm
from .arms import SamplerObserver

ADAPTER = causal_lm()


def split_batch(batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The model's inputs and the labels of a dict batch; the ``ids`` column rides along unscored."""
    return {"input_ids": batch["input_ids"]}, batch["input_ids"]


def sequence_losses(model: torch.nn.Module, batch: dict[str, torch.Tensor], reduction: str = "none") -> torch.Tensor:
    """Per-sequence training losses (B,) (their mean with ``reduction="mean"``), through the same adapter hooks the
    scoring pass uses."""
    inputs, labels = split_batch(batch)
    losses = ADAPTER["reduce"](ADAPTER["loss_fn"](ADAPTER["forward"](model, inputs), labels), labels)
    return losses.mean() if reduction == "mean" else losses


class SequenceBatches:
    """Dict batches of a pool of chunks, in an order fixed by ``(seed, epoch)`` (or a sampler's, when given), so
    every arm of a seed reads the same sequence of chunks whatever its batch size.

    Attributes:
        progress: epochs done, fractional (the batch just taken included).
    """

    def __init__(self, chunks: torch.Tensor, batch_size: int, seed: int, sampler: PruningSampler | None = None):
        self.chunks, self.batch_size, self.seed, self.sampler = chunks, batch_size, seed, sampler
        self.epoch, self.yielded, self.epoch_batches = 0, 0, len(self)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self.sampler is not None:
            self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        count = len(self.chunks) if self.sampler is None else len(self.sampler)
        return math.ceil(count / self.batch_size)

    @property
    def progress(self) -> float:
        return self.epoch + self.yielded / max(1, self.epoch_batches)

    def __iter__(self):
        if self.sampler is None:
            generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
            order = torch.randperm(len(self.chunks), generator=generator)
        else:
            order = torch.as_tensor(list(self.sampler), dtype=torch.long)
        self.epoch_batches, self.yielded = len(self), 0
        for start in range(0, len(order), self.batch_size):
            ids = order[start : start + self.batch_size]
            self.yielded += 1
            yield {"input_ids": self.chunks[ids].long(), "ids": ids}


@dataclass(frozen=True)
class LMArm:
    """One training configuration (``policy=None`` and ``prune=None``: the plain baseline).

    Attributes:
        name: label in tables and plots.
        policy: ``"topk"``, ``"rank"``, ``"random"``, ``"reducible"`` (top-k on loss minus irreducible loss) or None.
        keep: share of each SB batch kept.
        layout: ``"shrink"`` or ``"fixed"`` (see the module docstring).
        staleness: with an int, a dense ``LossCache`` (epochs) fed by ``observe()`` from the training step.
        prune: ``"infobatch"`` or ``"random"``: a ``PruningSampler`` (prune 0.5) over a cache fed by ``observe()``.
        batch, lr: the recipe; None takes the tuned baseline's.
        score: ``"loss"`` or ``"gradnorm"`` (sbdata's ``score=``).
        weighted: train on the importance-weighted mean (``return_weights=True``; sampling policies).

    ``keep="auto"`` is sbdata's controller (``Auto`` with its defaults, a long decision history).
    """

    name: str
    policy: str | None = None
    keep: float | str = 1.0
    layout: str = "shrink"
    staleness: int | None = None
    prune: str | None = None
    batch: int | None = None
    lr: float | None = None
    score: str = "loss"
    weighted: bool = False

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "name"}

    @property
    def metered_by_epochs(self) -> bool:
        """Pruning arms run the baseline's epochs (their saving is fewer steps); the others run to a FE budget."""
        return self.prune is not None

    def build(
        self, model, chunks: torch.Tensor, *, batch: int, seed: int, epochs: int, irreducible=None
    ) -> tuple[Any, SequenceBatches, Any]:
        """(the iterable of training batches, its source, the object whose ``observe`` takes the step's losses)."""
        if self.prune is not None:
            cache = LossCache(staleness=1, size=len(chunks))
            sampler = PruningSampler(len(chunks), cache, epochs=epochs, prune=0.5, rule=self.prune, seed=seed)
            source = SequenceBatches(chunks, batch, seed, sampler)
            return source, source, SamplerObserver(sampler, ids=lambda batch: batch["ids"])
        if self.policy is None:
            source = SequenceBatches(chunks, batch, seed)
            return source, source, None
        fixed = self.layout == "fixed"
        source = SequenceBatches(chunks, batch, seed)
        policy: Any = ReducibleSelect(irreducible, policy="topk") if self.policy == "reducible" else self.policy
        cached: dict[str, Any] = {}
        if self.staleness is not None:
            cached = {"cache": LossCache(staleness=self.staleness, size=len(chunks)), "id_key": "ids"}
        loader = SBLoader(
            source,
            model,
            keep=Auto(decisions_kept=100_000) if self.keep == "auto" else self.keep,
            policy=policy,
            score=self.score,
            return_weights=self.weighted,
            batch_size=batch if fixed else None,
            generator=seed,
            loss_fn=ADAPTER["loss_fn"],
            forward=ADAPTER["forward"],
            reduce=ADAPTER["reduce"],
            split=split_batch,
            **cached,
        )
        if self.weighted:
            weighted = WeightedBatches(loader)
            return weighted, source, weighted
        return loader, source, loader if self.staleness is not None else None


def selection_arms() -> list[LMArm]:
    """Top-k and its equal-cost ``random`` control at keep 0.5 and 0.25 in both layouts, ``rank`` and reducible."""
    arms = []
    for keep in (0.5, 0.25):
        for layout in ("shrink", "fixed"):
            for policy in ("topk", "random"):
                arms.append(LMArm(f"{policy}-{keep}-{layout}", policy, keep, layout))
    arms += [LMArm("rank-0.5-shrink", "rank", 0.5), LMArm("reducible-0.5-shrink", "reducible", 0.5)]
    return arms


def auto_arms() -> list[LMArm]:
    """Importance sampling by loss and by gradient norm (weighted) at keep 0.5, and ``keep="auto"`` on gradnorm."""
    return [
        LMArm("importance-0.5-shrink", "importance", 0.5, weighted=True),
        LMArm("importance-gradnorm-0.5-shrink", "importance", 0.5, score="gradnorm", weighted=True),
        LMArm("auto", "importance", "auto", score="gradnorm", weighted=True),
    ]


class WeightedBatches:
    """An SBLoader with ``return_weights=True`` as dict batches with a ``"weights"`` entry (``weights * n``, so the
    run's ``(weights(data) * losses).mean()`` is the unbiased weighted sum); also the run's observer slot, which only
    gives the weights (nothing to observe)."""

    def __init__(self, loader: SBLoader) -> None:
        self.loader = loader
        self.engine = loader.engine

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __iter__(self):
        for batch, weights in self.loader:
            yield {**batch, "weights": weights * len(weights)}

    def observe(self, data: dict[str, torch.Tensor], losses: torch.Tensor) -> None:
        """Nothing: the weighted arms keep no cache."""

    def weights(self, data: dict[str, torch.Tensor]) -> torch.Tensor:
        return data["weights"]


def repeating_arms() -> list[LMArm]:
    """What only a data-repeating regime can use: the cache with ``observe()`` and epoch-level pruning."""
    return [
        LMArm("cache-s2-observe-0.5-shrink", "topk", 0.5, staleness=2),
        LMArm("prune-infobatch", prune="infobatch"),
        LMArm("prune-random", prune="random"),
    ]
