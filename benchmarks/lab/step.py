"""The one training step (:func:`train_step`), the one-cycle LR as a function of progress (:func:`one_cycle`), and plain
fitting outside the measured runs (:func:`fit`: a continued suite's pretraining, an irreducible model)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from .batches import Batches
from .domain import Domain


def one_cycle(progress: float, max_lr: float, pct_start: float = 0.3) -> float:
    """``torch.optim.lr_scheduler.OneCycleLR``'s cosine shape as a function of training progress in [0, 1]."""
    initial = max_lr / 25
    final = initial / 1e4
    if progress < pct_start:
        return initial + (max_lr - initial) * (1 - math.cos(math.pi * progress / pct_start)) / 2
    q = min(1.0, (progress - pct_start) / (1 - pct_start))
    return final + (max_lr - final) * (1 + math.cos(math.pi * q)) / 2


def train_step(domain: Domain, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any, *,
               observe: Callable[[Any, torch.Tensor], None] | None = None,
               weights: Callable[[Any], torch.Tensor] | None = None) -> None:  # fmt: skip
    """The one training step: the batch's mean loss (weighted where ``weights`` gives the samples' weights), its
    detached per-sample losses handed to ``observe`` where given (the one line a cache user adds)."""
    model.train()
    if observe is None and weights is None:
        loss = domain.loss(model, batch, "mean")
    else:
        per_sample = domain.loss(model, batch, "none")
        if observe is not None:
            observe(batch, per_sample.detach())
        loss = per_sample.mean() if weights is None else (weights(batch) * per_sample).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def fit(domain: Domain, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Batches, epochs: int,
        lr: float, *, observe: Callable[[Any, torch.Tensor, int], None] | None = None) -> int:  # fmt: skip
    """Plain training outside the measured runs: ``epochs`` of ``batches``, the LR one-cycle over them by step;
    ``observe(batch, losses, epoch)`` gets each batch's detached losses. Returns the steps taken."""
    total, step = epochs * len(batches), 0
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        for batch in batches:
            for group in optimizer.param_groups:
                group["lr"] = one_cycle(step / total, lr)
            step += 1
            seen = None if observe is None else (lambda b, per, epoch=epoch: observe(b, per, epoch))
            train_step(domain, model, optimizer, batch, observe=seen)
    return step
