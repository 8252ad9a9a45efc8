"""The one training run of every recipe and domain (:func:`train_run`), a continued suite's pretraining, sbdata's
scoring pass as the loader runs it, and the timings' endless steps.

A run trains one :class:`~.arm.Arm` for a whole number of epochs, its one-cycle LR annealed over exactly that budget
by loader progress (the LR of a step is read at the progress before it; a recipe with ``"schedule": "constant"``
keeps its LR), and returns a JSON-ready record: the arm's
configuration, its steps, this thread's CPU seconds (evaluations excluded), what the arm's loader counted, and the
domain's metric on every test set at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from ._sb import LossCache, Scorer
from .arm import Arm, Built
from .batches import Batches
from .domain import Data, Domain
from .step import fit, one_cycle, train_step
from .timing import cpu_clock


def start(domain: Domain, family: str, data: Data, seed: int, *, continued: bool) -> tuple[torch.nn.Module, Any]:
    """The model a seed's runs start from (``torch.manual_seed(seed)`` first): fresh, or holding the seed's
    pretrained weights; and the pretrained states (None from scratch)."""
    torch.manual_seed(seed)
    model = domain.model(family)
    pretrained = data.pretrained(seed) if continued else None
    if pretrained is not None:
        model.load_state_dict(pretrained["model"])
    return model, pretrained


def train_run(domain: Domain, family: str, data: Data, arm: Arm, *, epochs: int, seed: int, continued: bool = False,
              inspect: Callable[[torch.nn.Module, torch.optim.Optimizer], dict[str, Any]] | None = None,
              inspect_at: tuple[float, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """Train ``arm`` for ``epochs`` from the seed's start (:func:`start`) and return its record: the configuration,
    ``steps``, ``cpu_seconds`` (this thread's, the arm's set-up included, evaluation excluded), what the arm
    counted (:meth:`~.arm.Built.record`) and the metric on every test set. ``inspect(model, optimizer)`` is called
    before the first step at or past each share of the run in ``inspect_at`` (ascending, in [0, 1)); its seconds are
    excluded and what it returns is recorded under ``"inspections"``."""
    model, pretrained = start(domain, family, data, seed, continued=continued)
    optimizer = domain.optimizer(model, domain.recipes[family], arm.lr)
    started = cpu_clock()
    built = arm.build(domain, family, model, data, epochs=epochs, seed=seed, pretrained=pretrained)
    total, steps, inspections, excluded = epochs * built.source.full, 0, [], 0.0
    constant = domain.recipes[family].get("schedule") == "constant"  # a recipe without an LR schedule
    for epoch in range(epochs):
        built.batches.set_epoch(epoch)
        for batch in built.batches:
            while inspect is not None and len(inspections) < len(inspect_at):
                at = inspect_at[len(inspections)]
                if (built.source.progress() - 1) / total < at:
                    break
                paused = cpu_clock()
                inspections.append({"at": at, **inspect(model, optimizer)})
                excluded += cpu_clock() - paused
            for group in optimizer.param_groups:
                group["lr"] = arm.lr if constant else one_cycle((built.source.progress() - 1) / total, arm.lr)
            train_step(domain, model, optimizer, batch, observe=built.observe, weights=built.weights)
            steps += 1
    seconds = cpu_clock() - started - excluded
    return {
        "seed": seed,
        "epochs": epochs,
        "steps": steps,
        "cpu_seconds": seconds,
        "config": arm.describe(),
        **built.record(),
        **domain.evaluate(model, data),
        **({"inspections": inspections} if inspect else {}),
    }


def pretrain(domain: Domain, family: str, data: Data, seed: int, smoke: bool) -> dict[str, Any]:
    """A continued suite's pretraining of seed ``seed`` (``torch.manual_seed(1000 + seed)``; the domain's
    :meth:`~.domain.Domain.pretraining` batch, LR and epochs; 2 epochs with ``smoke``), its step feeding a dense
    ``LossCache`` that the warm-cache arms carry into the run. Returns the states to save and the pretrained model's
    metrics (``pretrained_<key>``)."""
    assert data.pretrain is not None, "a continued suite's data has a pretraining set"
    how = domain.pretraining(family)
    epochs = 2 if smoke else how["epochs"]
    torch.manual_seed(1000 + seed)
    model = domain.model(family)
    n = len(data.pretrain[0])
    cache = LossCache(size=n)
    batches = Batches(domain, data.pretrain, how["batch"], 1000 + seed, ids=True)
    ids = domain.id_key
    fit(domain, model, domain.optimizer(model, domain.recipes[family], how["lr"]), batches, epochs, how["lr"],
        observe=lambda batch, losses, epoch: cache.observe(batch[ids], losses, epoch))  # fmt: skip
    return {"model": model.state_dict(), "cache": cache.state_dict(), "seed": seed, "epochs": epochs,
            **{f"pretrained_{k}": v for k, v in domain.evaluate(model, data).items()}}  # fmt: skip


def endless(batches: Any, step: Callable[[Any], None], *, prefill: bool = False) -> Iterator[None]:
    """``step`` on ``batches`` epoch after epoch, yielding after each (the blocks every step timing times); with
    ``prefill``, one whole epoch runs first, unyielded (a cache then knows every sample)."""
    epoch = 0
    if prefill:
        batches.set_epoch(epoch)
        for batch in batches:
            step(batch)
        epoch += 1
    while True:
        batches.set_epoch(epoch)
        for batch in batches:
            step(batch)
            yield None
        epoch += 1


def endless_steps(domain: Domain, family: str, data: Data, arm: Arm, *, continued: bool, prefill: bool = False,
                  model: torch.nn.Module | None = None) -> Iterator[None]:  # fmt: skip
    """Endless training steps of ``arm`` (its own batches and step, epoch after epoch) at a small fixed LR from seed
    0's start, or on ``model`` (shared with a scoring pass timed back to back)."""
    pretrained = None
    if model is None:
        model, pretrained = start(domain, family, data, 0, continued=continued)
    elif continued:
        pretrained = data.pretrained(0)
    optimizer = domain.optimizer(model, domain.recipes[family], arm.lr / 25)
    built = arm.build(domain, family, model, data, epochs=10**6, seed=0, pretrained=pretrained)
    return endless(built.batches, lambda b: train_step(domain, model, optimizer, b, observe=built.observe,
                                                       weights=built.weights), prefill=prefill)  # fmt: skip


def scoring_pass(domain: Domain, score_mode: str = "batch", autocast: bool = False) -> Callable[..., torch.Tensor]:
    """sbdata's own scoring pass, as ``SBLoader`` runs it on this domain (its ``Scorer`` in ``score_mode``, built from
    the domain's loader options; under bfloat16 autocast with ``autocast``): ``pass_(model, batch)`` returns the
    batch's per-sample losses, (B,) on the CPU, with no side effect on the model."""
    options = domain.sb_options()
    split = options.pop("split")
    scorer = Scorer(**options, score_mode=score_mode, autocast_dtype=torch.bfloat16 if autocast else None)
    cpu = torch.device("cpu")

    def pass_(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        inputs, targets = split(batch)
        return scorer(model, inputs, targets, _length(batch), cpu)

    return pass_


def endless_scoring(domain: Domain, family: str, data: Data, batch: int, *, continued: bool, autocast: bool = False,
                    score_mode: str = "batch", model: torch.nn.Module | None = None) -> Iterator[None]:  # fmt: skip
    """Endless scoring passes (:func:`scoring_pass`) and nothing else, over each loader batch of ``batch`` samples;
    seed 0's start unless ``model`` is given."""
    if model is None:
        model, _ = start(domain, family, data, 0, continued=continued)
    scored, pass_ = model, scoring_pass(domain, score_mode, autocast)
    return endless(Batches(domain, data.train, batch, 0), lambda b: pass_(scored, b))


def endless_own_work(domain: Domain, family: str, data: Data, arm: Arm, *, continued: bool,
                     prefill: bool = False) -> Iterator[None]:  # fmt: skip
    """sbdata's own work in ``arm``'s step and nothing else: the arm built as its runs build it on the domain's tiny
    model (:meth:`~.domain.Domain.tiny`), each batch taken and, where the run's step does, its losses observed (zeros)
    and its weights read; no training step."""
    torch.manual_seed(0)
    pretrained = data.pretrained(0) if continued else None
    built: Built = arm.build(domain, family, domain.tiny(), data, epochs=10**6, seed=0, pretrained=pretrained)

    def own(batch: Any) -> None:
        if built.observe is not None:
            built.observe(batch, torch.zeros(_length(batch)))
        if built.weights is not None:
            built.weights(batch)

    return endless(built.batches, own, prefill=prefill)


def _length(batch: Any) -> int:
    first = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return len(first)
