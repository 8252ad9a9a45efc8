"""One training configuration (:class:`Arm`) and what it builds on any domain (:class:`Built`): the batches, the
loader, and the hooks the training step calls.

An arm is plain training at its own batch and LR, or sbdata's selection on top (a policy and a ``keep``, fresh or with
the warm cache, scored in bfloat16 or not, ``keep="auto"`` told the run's length or not), or a ``PruningSampler``
choosing each epoch's samples. Every selection arm uses the shrink layout: each selection step trains
``ceil(keep * batch)`` of its ``batch``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._sb import Auto, LossCache, PruningSampler, ReducibleSelect, SBLoader, auto_decisions
from .batches import Batches
from .domain import Data, Domain
from .step import fit


@dataclass
class Built:
    """An arm built for one run.

    Attributes:
        batches: what the training loop iterates (``set_epoch`` each epoch): the loader, or the source itself.
        source: the batches underneath (their progress is the run's clock).
        loader: the arm's ``SBLoader``, or None for plain training and the sampler alone.
        observe: hands a batch's detached per-sample losses on (the warm cache's or the sampler's), or None.
        weights: a batch's loss weights (the sampler's rescaling), or None.
        upfront: work done before the run's first step, for its record (``upfront_steps``, ``upfront_scored``).
    """

    batches: Any
    source: Batches
    loader: SBLoader | None = None
    observe: Callable[[Any, torch.Tensor], None] | None = None
    weights: Callable[[Any], torch.Tensor] | None = None
    upfront: dict[str, int] = dataclasses.field(default_factory=dict)
    auto: bool = False

    def record(self) -> dict[str, Any]:
        """What the run's record keeps of the arm: sbdata's counts, the samples each pruned epoch loaded,
        ``keep="auto"``'s decisions."""
        out: dict[str, Any] = dict(self.upfront)
        if self.source.sampler is not None:
            out["samples_loaded"] = self.source.loaded
        if self.loader is not None:
            counts = self.loader.stats
            out["sb"] = {"steps": counts.steps, "sb_steps": counts.sb_steps, "samples_seen": counts.samples_seen,
                         "samples_scored": counts.samples_scored}  # fmt: skip
            if self.auto:
                out["auto"] = auto_decisions(counts)
        return out


STALENESS = 2  # the warm cache's


@dataclass(frozen=True)
class Arm:
    """One configuration at its own batch and LR (one-cycle, annealed over its own run).

    Attributes:
        name: the arm's family (``"plain"``, ``"topk-0.25"``, ...); :attr:`label` adds the batch and LR.
        batch: loader batch size.
        lr: peak LR.
        policy: None (plain), an sbdata policy name (``"reducible"``: ``ReducibleSelect`` over top-k with the
            domain's irreducible losses), or ``"default"`` (no ``policy=``: sbdata's default).
        keep: the share of each selection step trained, or ``"auto"``.
        warm: the warm cache: the pretraining run's ``LossCache`` carried in with ``warm_start`` (``staleness``
            epochs, the training step observing its losses).
        prune: with a float, a ``PruningSampler`` prunes by ``rule`` each epoch over the warm cache, or over a cache
            the training step fills from scratch.
        rule: the sampler's rule (``"infobatch"`` prunes ``prune`` of the below-mean losses; ``"top_losses"`` keeps
            the top quarter by last training loss plus a tenth of the rest, ``prune`` not read).
        autocast: score under bfloat16 autocast (``autocast_dtype=torch.bfloat16``).
        staleness: the warm cache's staleness in epochs (the step timings set 0 and ``10**6``).
        told: ``keep="auto"`` only: tell it the run's length in epochs (``Auto(epochs=...)``).
        score_mode: sbdata's ``score_mode`` (``"batch"``, its default; the suites recorded before that default
            changed say ``"eval"``).
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
    told: bool = False
    score_mode: str = "batch"

    @property
    def label(self) -> str:
        return f"{self.name} b={self.batch} lr={self.lr:g}"

    @property
    def kept(self) -> int:
        """The batch a selection step trains (the loader batch for plain training and the sampler)."""
        return math.ceil(float(self.keep) * self.batch) if self.policy is not None else self.batch

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "name"}

    def build(self, domain: Domain, family: str, model: torch.nn.Module, data: Data, *, epochs: int, seed: int,
              pretrained: dict[str, Any] | None = None) -> Built:  # fmt: skip
        """The run's batches and hooks on ``model`` (of ``family``); ``pretrained``: the seed's pretrained states (the
        warm cache's source)."""
        n = data.size
        cache = None
        if self.warm or self.prune is not None:
            cache = LossCache(staleness=self.staleness, size=n)
        if self.warm:
            if pretrained is None:
                raise ValueError(f"arm {self.name}: warm=True needs the pretrained states (a continued suite)")
            cache.warm_start(pretrained["cache"], id_map=data.id_map)  # type: ignore[union-attr]
        sampler = None
        if self.prune is not None:
            assert cache is not None
            sampler = PruningSampler(n, cache, epochs=epochs, prune=self.prune, rule=self.rule, seed=seed)
        source = Batches(domain, data.train, self.batch, seed, ids=cache is not None, sampler=sampler)
        if self.policy is None:
            if sampler is None:
                return Built(source, source)
            ids = domain.id_key
            return Built(source, source, observe=lambda b, losses: sampler.observe(b[ids], losses),
                         weights=lambda b: sampler.weights(b[ids]))  # fmt: skip
        options: dict[str, Any] = {**domain.sb_options(), "keep": self.keep, "generator": seed,
                                  "score_mode": self.score_mode}  # fmt: skip
        upfront: dict[str, int] = {}
        if self.keep == "auto":
            options["keep"] = Auto(epochs=epochs) if self.told else "auto"
        if self.policy == "reducible":
            losses, steps = irreducible_losses(domain, family, data, model, seed, self.lr)
            upfront = {"upfront_steps": steps, "upfront_scored": n}
            options.update(policy=ReducibleSelect(losses, policy="topk"), id_key=domain.id_key)
            source.ids = True
        elif self.policy != "default":
            options["policy"] = self.policy
        if self.autocast:
            options["autocast_dtype"] = torch.bfloat16
        if cache is not None:
            options.update(cache=cache, id_key=domain.id_key)
        loader = SBLoader(source, model, **options)
        auto = self.keep == "auto"
        if sampler is not None:
            ids = domain.id_key
            return Built(loader, source, loader, observe=loader.observe, weights=lambda b: sampler.weights(b[ids]),
                         auto=auto)  # fmt: skip
        observe = loader.observe if cache is not None else None
        return Built(loader, source, loader, observe=observe, upfront=upfront, auto=auto)


def irreducible_losses(domain: Domain, family: str, data: Data, model: torch.nn.Module, seed: int,
                       lr: float) -> tuple[torch.Tensor, int]:  # fmt: skip
    """RHO-LOSS's irreducible losses of every training sample, (N,): a copy of the run's starting ``model`` trained
    one epoch on the hold-out (the pretraining's batch, ``lr`` one-cycle, its own RNG stream), then one no-grad pass
    over the training set at that batch. Returns the losses and the training steps taken."""
    if data.holdout is None:
        raise ValueError(f"policy='reducible' needs the domain's hold-out: {domain.name}'s data has none")
    batch = domain.pretraining(family)["batch"]
    with torch.random.fork_rng():
        torch.manual_seed(30_000 + seed)
        irreducible = copy.deepcopy(model)  # the run's start, whatever model the arm was built on
        optimizer = domain.optimizer(irreducible, domain.recipes[family], lr)
        steps = fit(domain, irreducible, optimizer, Batches(domain, data.holdout, batch, 30_000 + seed), 1, lr)
        irreducible.eval()
        with torch.no_grad():
            losses = [domain.loss(irreducible, domain.batch(data.train, index, False))
                      for index in torch.arange(data.size).split(batch)]  # fmt: skip
    return torch.cat(losses), steps
