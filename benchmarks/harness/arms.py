"""Benchmark arms: the baseline, its controls, Composer's rule and sbdata's configurations, as data.

An :class:`Arm` builds, for one run, the iterable of training batches and a :class:`Probe` that reports the
run's loader progress and scoring cost. Two batch layouts exist for selection arms:

- *shrink* (``pooled=False``): loader batch B, each SB batch shrinks to ``ceil(keep * B)`` (Composer's layout);
  the optimizer takes as many steps per epoch as the baseline, on smaller batches.
- *fixed* (``pooled=True``): loader batch B (or ``B / keep`` with ``candidates="wide"``), kept samples pooled into
  output batches of exactly B (``batch_size=B``), so the optimizer sees the baseline's batch size and each output
  batch costs about ``B / keep`` scoring forwards (sample-then-batch). A plain step (outside the schedule window)
  yields the loader batch whole, which is why the default candidate batch is B: plain steps then train at B too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ._sb import HistoryPercentile, LossCache, PruningSampler, ReducibleSelect, SBLoader, Schedule, keep_count
from .cost import upfront_fe
from .data import ShuffledBatches, inputs_targets
from .models import MODELS, RECIPES
from .train import fit, user_optimizer


@dataclass
class Probe:
    """What a run needs to know about its batches: loader progress and the scoring cost so far."""

    loader_batches_per_epoch: int
    loader: SBLoader | None = None
    extra_forwards: int = 0  # models scored per SB sample besides the live one (the irreducible model)
    observe: bool = False  # the training step hands its per-sample losses to the loader's LossCache
    pixel_ratio: float = 1.0  # scoring input size relative to training input size (scale_factor ** spatial dims)
    upfront_fe: float = 0.0

    def consumed(self, steps: int) -> int:
        """Loader batches consumed when output batch ``steps`` (0-based) arrives."""
        return steps + 1 if self.loader is None else self.loader.engine.step

    def scored(self) -> int:
        return 0 if self.loader is None else self.loader.engine.counts["samples_scored"]

    def reused(self) -> int:
        """Samples of SB steps whose loss came from a LossCache instead of a scoring forward."""
        return 0 if self.loader is None else self.loader.engine.counts["samples_reused"]

    def scoring_fe(self) -> float:
        return self.scored() * (self.pixel_ratio + self.extra_forwards)


class SamplerObserver:
    """``observe(batch, losses)`` for a run without SBLoader: the sampler records the losses into its cache; and
    ``weights(batch)``, the sampler's loss weights. ``ids(batch)`` reads the batch's ids (default: its last field)."""

    def __init__(self, sampler: PruningSampler, ids: Callable[[Any], torch.Tensor] = lambda batch: batch[-1]) -> None:
        self.sampler, self.ids = sampler, ids

    def observe(self, batch: Any, losses: torch.Tensor) -> None:
        self.sampler.observe(self.ids(batch), losses)

    def weights(self, batch: Any) -> torch.Tensor:
        return self.sampler.weights(self.ids(batch))


class OwnRecipe:
    """For an arm dataclass with its own ``batch`` and ``lr`` fields: the recipe ``train_run`` trains it with, and
    the configuration its record holds."""

    batch: int
    lr: float

    @property
    def recipe(self) -> dict[str, Any]:
        return {"batch": self.batch, "lr": self.lr}

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "name"}  # type: ignore[call-overload]


@dataclass(frozen=True)
class Arm:
    """One training configuration. ``policy=None`` is a plain baseline (``small_batch`` trains at keep*B).

    Attributes:
        name: the arm's label in tables and plots.
        policy: ``"topk"``, ``"rank"``, ``"random"``, ``"history"``, ``"reducible"`` or None.
        keep: share of each SB batch kept.
        pooled: fixed-size output batches of B (see the module docstring).
        candidates: ``"batch"`` (loader batch B) or ``"wide"`` (loader batch ceil(B / keep)); pooled arms only.
        start, end, interrupt: the schedule window; ``start=None`` selects on every batch.
        score_mode: ``"eval"`` or ``"train"``.
        small_batch: baseline at batch ``ceil(keep * B)``.
        base: base policy of ``"reducible"``.
        holdout: share of the training set that trains the irreducible model (excluded from this arm's data).
        il_epochs: epochs of the irreducible model's training.
        staleness: with an int, a ``LossCache(staleness, size=n_train)`` reuses losses up to that many epochs old.
        observe: with a cache, the training step's per-sample losses are recorded with ``loader.observe``.
        refresh: the cache's ``refresh``: ``"observed"`` (observed losses reset a sample's age) or ``"scored"``.
    """

    name: str
    policy: str | None = None
    keep: float = 1.0
    pooled: bool = False
    candidates: str = "batch"
    start: float | None = None
    end: float = 1.0
    interrupt: int = 0
    score_mode: str = "eval"
    small_batch: bool = False
    base: str = "topk"
    holdout: float = 0.1
    il_epochs: int = 10
    staleness: int | None = None
    observe: bool = False
    refresh: str = "observed"

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "name"}

    def build(self, model, split, *, family: str, batch: int, epochs: int, seed: int) -> tuple[Any, Probe]:
        """The run's training batches (an object with ``set_epoch``) and its probe."""
        tensors = split.fields()
        if self.policy is None:
            size = keep_count(self.keep, batch) if self.small_batch else batch
            batches = ShuffledBatches(tensors, size, seed)
            return batches, Probe(len(batches))
        policy: Any = self.policy
        upfront, extra = 0.0, 0
        if self.policy == "history":
            policy = HistoryPercentile()
        elif self.policy == "reducible":
            tensors, irreducible, upfront = self._irreducible(split, family, batch, seed)
            policy, extra = ReducibleSelect(irreducible, policy=self.base), 1
        cached = {}
        if self.staleness is not None:  # every batch carries its samples' positions, the cache's ids, last
            tensors = (*tensors, torch.arange(len(tensors[0])))
            cache = LossCache(staleness=self.staleness, size=len(tensors[0]), refresh=self.refresh)
            cached = {"cache": cache, "id_key": -1}
        wide = self.pooled and self.candidates == "wide"
        source = ShuffledBatches(tensors, math.ceil(batch / self.keep - 1e-9) if wide else batch, seed)
        schedule = None
        if self.start is not None:
            total = epochs * len(source)
            schedule = Schedule(start=self.start, end=self.end, interrupt=self.interrupt, total_steps=total)
        loader = SBLoader(
            source,
            model,
            F.cross_entropy,
            keep=self.keep,
            policy=policy,
            schedule=schedule,
            score_mode=self.score_mode,
            batch_size=batch if self.pooled else None,
            generator=seed,
            nan_policy="keep",
            split=inputs_targets,
            **cached,
        )
        observe = self.observe and self.staleness is not None
        return loader, Probe(len(source), loader, extra_forwards=extra, upfront_fe=upfront, observe=observe)

    def _irreducible(self, split, family: str, batch: int, seed: int):
        """Train the irreducible-loss model on a held-out share of the (noisy) training set (RHO-LOSS)."""
        n = len(split.y_train)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(10_000 + seed))
        held, rest = perm[: int(self.holdout * n)], perm[int(self.holdout * n) :]
        with torch.random.fork_rng():
            torch.manual_seed(20_000 + seed)
            model = MODELS[family]()
            optimizer = user_optimizer(RECIPES[family])(model)
            fit(
                model,
                optimizer,
                ShuffledBatches(split.fields(held), batch, seed),
                self.il_epochs,
                RECIPES[family]["lr"],
            )
        model.eval()
        upfront = upfront_fe(1.0, self.il_epochs, len(held))
        return split.fields(rest), model, upfront


def sb(name: str, policy: str, keep: float, *, pooled: bool = True, start: float | None = None, **kw: Any) -> Arm:
    """A selection arm, always on by default (``start=None``)."""
    return Arm(name, policy=policy, keep=keep, pooled=pooled, start=start, **kw)


BASELINE = Arm("baseline")


def composer(keep: float = 0.5) -> Arm:
    """Composer's SelectiveBackprop as its docs give it: rank sampling, batches shrunk to keep*B, scoring in train
    mode, selection for 50%-90% of training with every second batch plain."""
    return Arm("composer", policy="rank", keep=keep, pooled=False, start=0.5, end=0.9, interrupt=2, score_mode="train")


def small_batch(keep: float) -> Arm:
    return Arm("baseline-small-batch", keep=keep, small_batch=True)
