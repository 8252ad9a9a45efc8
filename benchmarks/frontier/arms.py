"""The frontier benchmark's arm: plain training or selection at its own batch and LR, from scratch or from a
pretrained model, fresh or with the warm cache, with or without a ``PruningSampler``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness._sb import LossCache, PruningSampler, SBLoader, auto_decisions
from benchmarks.harness.arms import OwnRecipe, Probe, SamplerObserver
from benchmarks.harness.data import ShuffledBatches, inputs_targets
from benchmarks.harness.models import MODELS
from benchmarks.harness.pruned import NoScoring, PrunedBatches, PruneProbe
from benchmarks.harness.train import endless
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
        prune: with a float, a ``PruningSampler`` prunes by ``rule`` each epoch over the warm cache, or from scratch
            over a cache the training step fills (a sample not yet seen is loaded).
        rule: the sampler's rule: ``"infobatch"`` (prunes ``prune`` of the below-mean losses) or ``"top_losses"``
            (the top 25% by last training loss plus 10% of the rest re-checked; ``prune`` not read).
        autocast: score under bfloat16 autocast (``autocast_dtype=torch.bfloat16``, its live check at the default
            interval).
        staleness: the warm cache's staleness in epochs (the step timing's kinds set 0 and 10**6).
    """

    name: str
    batch: int = 256
    lr: float = 3e-3
    policy: str | None = None
    keep: float | str = 1.0
    warm: bool = False
    prune: float | None = None
    rule: str = "infobatch"
    autocast: bool = False
    staleness: int = STALENESS

    @property
    def label(self) -> str:
        return f"{self.name} b={self.batch} lr={self.lr:g}"

    def build(self, model, split: Mix, *, family: str, batch: int, epochs: int, seed: int) -> tuple[Any, Probe]:
        tensors = split.fields()
        n = len(tensors[0])
        cache = None
        if self.warm or self.prune is not None:  # the ids ride in the last field
            tensors = (*tensors, torch.arange(n))
            cache = LossCache(staleness=self.staleness, size=n)
        if self.warm:
            cache.warm_start(split.pretrained(seed)["cache"], id_map=split.id_map())
        source: Any
        sampler = None
        if self.prune is not None:
            assert cache is not None
            sampler = PruningSampler(n, cache, epochs=epochs, prune=self.prune, rule=self.rule, seed=seed)
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
        if self.autocast:
            options["autocast_dtype"] = torch.bfloat16
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


def endless_steps(arm: BudgetArm, data: Mix, family: str, *, pretrained: bool, seed: int = 0, prefill: bool = False,
                  model: nn.Module | None = None):  # fmt: skip
    """Endless training steps of ``arm`` (the step timing's blocks): the run's own batches and step
    (``harness.train.probed_step``), epoch after epoch, at a small fixed LR, from the seed's pretrained model or a
    fresh one (or ``model``, shared with a scoring pass timed back to back). With ``prefill``, one epoch runs before
    the first step is yielded (a warm cache then knows every sample)."""
    model = seed_model(data, family, pretrained, seed) if model is None else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=arm.lr / 25)
    batches, probe = arm.build(model, data, family=family, batch=arm.batch, epochs=10**6, seed=seed)
    return steps(model, optimizer, probe, batches, prefill=prefill)


def seed_model(data: Mix, family: str, pretrained: bool, seed: int) -> nn.Module:
    """The suite's model as seed ``seed``'s runs start it: fresh from that seed, or its pretrained state."""
    torch.manual_seed(seed)
    model = MODELS[family]()
    if pretrained:
        model.load_state_dict(data.pretrained(seed)["model"])
    return model


def endless_scoring(data: Mix, family: str, batch: int, *, pretrained: bool, autocast: bool = False, seed: int = 0,
                    model: nn.Module | None = None):  # fmt: skip
    """Endless scoring passes and nothing else (a part of the price table, timed alone): the model in eval mode, a
    no-grad forward and the per-sample loss of each loader batch of ``batch`` samples, under bfloat16 autocast with
    ``autocast``; the model's mode restored. ``model``: the model to score (shared with a training step timed back to
    back); None builds the seed's own."""
    model = seed_model(data, family, pretrained, seed) if model is None else model

    def score(b: tuple[torch.Tensor, ...]) -> None:
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            F.cross_entropy(model(b[0]), b[1], reduction="none")
        model.train()

    return endless(ShuffledBatches(data.fields(), batch, seed), score)


def endless_own_work(arm: BudgetArm, data: Mix, *, seed: int = 0, prefill: bool = False):
    """sbdata's own work in ``arm``'s step and nothing else (a part of the price table, timed directly): the arm's
    loader and sampler built as its runs build them, on a model that does almost nothing (``Flatten`` and
    ``Linear(40, 10)``: a few microseconds a batch), each batch taken and, where the run's step does, its losses
    observed (zeros) and its weights read; no training step. Includes the batches' indexing, which the plain step's
    price includes too (microseconds)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(40, 10))
    batches, probe = arm.build(model, data, family="none", batch=arm.batch, epochs=10**6, seed=seed)
    weights = getattr(probe, "weights", None)

    def own(batch: tuple[torch.Tensor, ...]) -> None:
        if probe.observe:
            probe.loader.observe(batch, torch.zeros(len(batch[0])))
        if weights is not None:
            weights(batch)

    return endless(batches, own, probe.consumed, prefill=prefill)
