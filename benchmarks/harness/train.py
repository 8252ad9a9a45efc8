"""The MNIST-1D benchmarks' training run (one arm, one budget, one seed), its LR schedule, and plain training.

A *run* (:func:`train_run`) trains one arm (``arms.py``) for a fixed number of epochs, its LR annealed to the end of
that budget, evaluates at evenly spaced points of loader progress and returns a JSON-ready record: the curve
(progress, forward-equivalents priced by ``cost.priced``, seconds without the evaluations, accuracy) and the final
numbers."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .cost import priced
from .data import Data
from .models import MODELS, RECIPES, accuracy


def one_cycle(progress: float, max_lr: float, pct_start: float = 0.3) -> float:
    """``torch.optim.lr_scheduler.OneCycleLR``'s cosine shape as a function of training progress in [0, 1]."""
    initial = max_lr / 25
    final = initial / 1e4
    if progress < pct_start:
        return initial + (max_lr - initial) * (1 - math.cos(math.pi * progress / pct_start)) / 2
    q = min(1.0, (progress - pct_start) / (1 - pct_start))
    return final + (max_lr - final) * (1 + math.cos(math.pi * q)) / 2


def constant(progress: float, lr: float) -> float:
    """A constant LR (a recipe without a schedule), in ``one_cycle``'s signature."""
    return lr


def user_optimizer(recipe: dict) -> Callable[[torch.nn.Module], torch.optim.Optimizer]:
    """The recipe's optimizer factory, ``make(model) -> AdamW`` (the one every run trains with; the convention of
    ``sbdata.advise(make_optimizer=)`` and the examples)."""
    return lambda model: torch.optim.AdamW(model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"])


def sample_losses(model: torch.nn.Module, batch: Any, reduction: str = "none") -> torch.Tensor:
    """The cross-entropy of a tuple batch ``(x, y, ...)``: per sample, or its ``reduction``."""
    return F.cross_entropy(model(batch[0]), batch[1], reduction=reduction)


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Any,
    *,
    losses: Callable[..., torch.Tensor] = sample_losses,
    observe: Callable[[Any, torch.Tensor], None] | None = None,
    weights: Callable[[Any], torch.Tensor] | None = None,
) -> None:
    """The one training step of every benchmark: the mean loss (``losses(model, batch, reduction)``; the tuple
    batches' cross-entropy by default, the language model's per-sequence loss), weighted where ``weights`` gives the
    samples' weights (a pruning sampler's rescaling, importance sampling's), its detached per-sample losses handed to
    ``observe`` where given (the one line a cache user adds)."""
    model.train()
    if observe is None and weights is None:
        loss = losses(model, batch, "mean")
    else:
        per_sample = losses(model, batch, "none")
        if observe is not None:
            observe(batch, per_sample.detach())
        loss = per_sample.mean() if weights is None else (weights(batch) * per_sample).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def probed_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, probe: Any, batch: Any) -> None:
    """:func:`train_step` as a run's probe asks: observed by its loader where ``probe.observe``, weighted by its
    ``weights`` where it has them."""
    observe = probe.loader.observe if probe.observe else None
    train_step(model, optimizer, batch, observe=observe, weights=getattr(probe, "weights", None))


def fit(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Any,
    epochs: int,
    lr: float,
    *,
    losses: Callable[..., torch.Tensor] = sample_losses,
    observe: Callable[[Any, torch.Tensor, int], None] | None = None,
) -> int:
    """Plain training outside the measured runs (an irreducible model, a continued suite's pretraining): ``epochs`` of
    ``batches`` by :func:`train_step`, the LR one-cycle over them by step; ``observe(batch, losses, epoch)`` gets each
    batch's detached losses (a cache fed as a user's step feeds it). Returns the steps taken."""
    total, step = epochs * len(batches), 0
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        for batch in batches:
            for group in optimizer.param_groups:
                group["lr"] = one_cycle(step / total, lr)
            step += 1
            seen = None if observe is None else (lambda b, per, epoch=epoch: observe(b, per, epoch))
            train_step(model, optimizer, batch, losses=losses, observe=seen)
    return step


def endless(batches: Any, step: Callable[[Any], None], consumed: Callable[[int], Any] = lambda i: i + 1, *,
            epoch: int = 0, prefill: bool = False):  # fmt: skip
    """``step`` on ``batches`` epoch after epoch from ``epoch``, yielding ``consumed(i)`` after the ``i``-th step: the
    blocks every step timing times. With ``prefill``, one whole epoch runs first, unyielded (a cache then knows every
    sample)."""
    if prefill:
        batches.set_epoch(epoch)
        for batch in batches:
            step(batch)
        epoch += 1
    i = 0
    while True:
        batches.set_epoch(epoch)
        for batch in batches:
            step(batch)
            yield consumed(i)
            i += 1
        epoch += 1


def endless_steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer, probe: Any, batches: Any, epoch: int = 0,
                  prefill: bool = False):  # fmt: skip
    """:func:`endless` on a run's batches and probe (:func:`probed_step`; yields ``probe.consumed``)."""
    return endless(batches, lambda batch: probed_step(model, optimizer, probe, batch), probe.consumed, epoch=epoch,
                   prefill=prefill)  # fmt: skip


def train_run(
    split: Data,
    arm: Any,
    *,
    family: str,
    epochs: int,
    seed: int,
    evals: int = 8,
    clock: Any = time.perf_counter,
    inspect: Callable[[Any, float, Any], dict[str, Any]] | None = None,
    inspect_at: Sequence[float] = (),
    schedule: Callable[[float, float], float] = one_cycle,
    build_model: Callable[[], torch.nn.Module] | None = None,
    recipe: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train one arm for ``epochs`` (an annealed run of that budget) and return its JSON record.

    Args:
        split: train (possibly noisy) and clean test tensors.
        arm: an ``_arms.Arm``; ``arm.build(...)`` returns the iterable of training batches and a cost probe.
        family: model family, a key of ``models.MODELS`` and ``RECIPES``.
        epochs: passes over the training set; the LR schedule anneals over exactly this budget.
        seed: initialisation and data-order seed (shared by every arm).
        evals: test evaluations at evenly spaced loader progress (the last at the end).
        clock: the seconds counted (evaluations excluded); wall-clock ``time.perf_counter`` by default,
            ``_timing.cpu_clock`` (this thread's CPU time) where processes share the cores.
        inspect: ``inspect(model, progress, optimizer) -> dict``, called on the live model and its optimizer (the
            LR of the step about to be taken not yet set) before the first step at or past
            each share of training in ``inspect_at`` (0: before the first step); its seconds are excluded, like
            the evaluations'; what it returns is recorded under ``"inspections"`` with ``at`` and ``progress``.
        inspect_at: shares of training in [0, 1), ascending.
        schedule: ``schedule(progress, lr) -> lr`` at each step; the one-cycle shape by default (``constant``: none).
        build_model: the model's constructor; ``MODELS[family]`` by default (a benchmark's own model).
        recipe: ``lr``, ``weight_decay`` and ``batch``; ``RECIPES[family]`` by default.
    """
    base = RECIPES[family] if recipe is None else recipe
    recipe = {**base, **getattr(arm, "recipe", {})}  # an arm may tune batch and LR (pruning arms)
    torch.manual_seed(seed)
    model = (MODELS[family] if build_model is None else build_model)()
    optimizer = user_optimizer(recipe)(model)
    setup = clock()
    batches, probe = arm.build(model, split, family=family, batch=recipe["batch"], epochs=epochs, seed=seed)
    upfront_seconds = clock() - setup
    total = epochs * probe.loader_batches_per_epoch
    curve, trained, flipped, steps, seconds, next_eval = [], 0, 0, 0, upfront_seconds, 1
    inspections: list[dict[str, Any]] = []
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        started = clock()
        for batch in batches:  # (x, y), then the clean labels of a noisy run, then ids for a cache
            y = batch[1]
            consumed = probe.consumed(steps)
            while inspect is not None and len(inspections) < len(inspect_at):
                at, progress = inspect_at[len(inspections)], (consumed - 1) / total
                if progress < at:
                    break
                seconds += clock() - started
                inspections.append({"at": at, "progress": round(progress, 4), **inspect(model, progress, optimizer)})
                started = clock()
            for group in optimizer.param_groups:
                group["lr"] = schedule((consumed - 1) / total, recipe["lr"])
            probed_step(model, optimizer, probe, batch)
            trained += len(y)
            if split.y_clean is not None:
                flipped += int((y != batch[2]).sum())
            steps += 1
            if consumed >= next_eval * total / evals and next_eval < evals:
                seconds += clock() - started
                curve.append(_point(model, split, probe, consumed / total, trained, seconds, steps))
                next_eval += 1
                started = clock()
        seconds += clock() - started
    curve.append(_point(model, split, probe, 1.0, trained, seconds, steps))
    final = curve[-1]
    return {
        "arm": arm.name,
        "family": family,
        "epochs": epochs,
        "seed": seed,
        "accuracy": final["accuracy"],
        "fe": final["fe"],
        "seconds": final["seconds"],
        "steps": steps,
        "samples_trained": trained,
        "samples_scored": probe.scored(),
        "samples_reused": probe.reused(),
        "noisy_share": flipped / trained if split.y_clean is not None else None,
        "upfront_fe": probe.upfront_fe,
        "upfront_seconds": upfront_seconds,
        "curve": curve,
        "config": arm.describe(),
        **getattr(probe, "extra", dict)(),  # arm-specific measurements (e.g. samples loaded per epoch)
        **({"inspections": inspections} if inspect is not None else {}),
    }


def _point(model, split: Data, probe, progress: float, trained: int, seconds: float, steps: int) -> dict[str, Any]:
    fe = priced(probe.scoring_fe(), trained, upfront=probe.upfront_fe)
    acc = accuracy(model, split.x_test, split.y_test)
    return {"progress": round(progress, 4), "fe": fe, "seconds": round(seconds, 3), "accuracy": acc, "steps": steps}
