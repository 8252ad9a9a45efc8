"""The frontier benchmark's arm: plain training or selection at its own batch and LR, from scratch or from a
pretrained model, fresh or with the warm cache, with or without a ``PruningSampler``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.harness._sb import LossCache, PruningSampler, SBLoader, auto_decisions
from benchmarks.harness.arms import OwnRecipe, Probe, SamplerObserver
from benchmarks.harness.data import ShuffledBatches, inputs_targets
from benchmarks.harness.models import MODELS
from benchmarks.harness.pruned import NoScoring, PrunedBatches, PruneProbe
from benchmarks.harness.train import endless_steps as steps

from .data import Mix

STALENESS = 2  # the warm cache's


@dataclass(frozen=True)
class BudgetArm(OwnRecipe):
    """One arm at its own batch and LR (one-cycle, annealed over its own budget).

    Attributes:
        name: the arm's family (``"plain"``, ``"topk-0.25"``, ...); :attr:`label` adds the batch and LR.
        batch: loader batch size.
        lr: peak LR.
        policy: None (plain), an sbdata policy name (``SBLoader``, shrink layout: each SB batch trains
            ``ceil(keep * batch)``), or ``"default"`` (no ``policy=``: sbdata's default, with ``keep="auto"``).
        keep: the share of each SB batch trained, or ``"auto"``.
        warm: the warm cache: the pretraining run's ``LossCache`` carried in with ``warm_start`` (staleness
            ``staleness``, the training step observing its losses).
        prune: with a float, a ``PruningSampler`` (InfoBatch) over the warm cache prunes this share each epoch.
        staleness: the warm cache's staleness in epochs (the step timing's kinds set 0 and 10**6).
    """

    name: str
    batch: int = 256
    lr: float = 3e-3
    policy: str | None = None
    keep: float | str = 1.0
    warm: bool = False
    prune: float | None = None
    staleness: int = STALENESS

    @property
    def label(self) -> str:
        return f"{self.name} b={self.batch} lr={self.lr:g}"

    def build(self, model, split: Mix, *, family: str, batch: int, epochs: int, seed: int) -> tuple[Any, Probe]:
        tensors = split.fields()
        n = len(tensors[0])
        cache = None
        if self.warm:
            tensors = (*tensors, torch.arange(n))
            cache = LossCache(staleness=self.staleness, size=n)
            cache.warm_start(split.pretrained(seed)["cache"], id_map=split.id_map())
        source: Any
        sampler = None
        if self.prune is not None:
            if cache is None:
                raise ValueError(f"arm {self.name}: prune= needs warm=True (the sampler reads the warm cache)")
            sampler = PruningSampler(n, cache, epochs=epochs, prune=self.prune, seed=seed)
            source = PrunedBatches(tensors, self.batch, sampler)
        else:
            source = ShuffledBatches(tensors, self.batch, seed)
        full = math.ceil(n / self.batch)
        if self.policy is None:
            if sampler is None:
                return source, Probe(full)
            pruning = NoScoring(source, sampler, None, full)
            pruning.loader = SamplerObserver(sampler)  # type: ignore[assignment]
            return source, pruning
        options: dict[str, Any] = {"keep": self.keep, "generator": seed, "split": inputs_targets}
        if self.policy != "default":
            options["policy"] = self.policy
        if cache is not None:
            options.update(cache=cache, id_key=-1)
        loader = SBLoader(source, model, F.cross_entropy, **options)
        probe: Probe = PruneProbe(source, sampler, loader, full) if sampler is not None else Probe(full, loader)
        probe.observe = cache is not None
        keys = ("steps", "sb_steps", "samples_seen", "samples_scored")
        extra = {"sb": lambda: {k: loader.engine.counts[k] for k in keys}}  # read at the run's end
        if self.keep == "auto":
            extra["auto"] = lambda: auto_decisions(loader.stats)
        base = getattr(probe, "extra", None)
        probe.extra = lambda: {  # type: ignore[attr-defined]
            **(base() if base is not None else {}),
            **{k: f() for k, f in extra.items()},
        }
        return loader, probe


def endless_steps(arm: BudgetArm, data: Mix, family: str, *, pretrained: bool, seed: int = 0, prefill: bool = False):
    """Endless training steps of ``arm`` (the step timing's blocks): the run's own batches and step
    (``harness.train.probed_step``), epoch after epoch, at a small fixed LR, from the seed's pretrained model or a
    fresh one. With ``prefill``, one epoch runs before the first step is yielded (a warm cache then knows every
    sample)."""
    torch.manual_seed(seed)
    model = MODELS[family]()
    if pretrained:
        model.load_state_dict(data.pretrained(seed)["model"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=arm.lr / 25)
    batches, probe = arm.build(model, data, family=family, batch=arm.batch, epochs=10**6, seed=seed)
    return steps(model, optimizer, probe, batches, prefill=prefill)
