"""``advise``'s first step: time the scoring pass and a training step at the loader's batch size and at a quarter of
it (interleaved, after a warm-up), and measure how unequal the scores are (``tau``), on the first loader batches."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import sbdata.batch as _batch
from sbdata.advice._branch import train_once
from sbdata.advice._settings import TrainStep
from sbdata.auto import CostTable, score_sums, tau_from_sums
from sbdata.scoring import Scorer


@dataclass(frozen=True)
class Timed:
    """What the timed steps measured.

    Attributes:
        batch: the largest loader batch seen (the loader's batch size B).
        tau: the variance-reduction factor of the scores at B (1: the scores are all alike).
        score_seconds: per batch size (B and ``B // 4``), the median seconds of a scoring pass.
        train_seconds: per batch size, the median seconds of a training step.
    """

    batch: int
    tau: float
    score_seconds: dict[int, float]
    train_seconds: dict[int, float]

    def cost_table(self) -> CostTable:
        """The :class:`~sbdata.CostTable` fitted to the medians."""
        return CostTable.fit(self.score_seconds, self.train_seconds)


def time_steps(
    batches: Iterator[Any],
    steps: int,
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    *,
    scorer: Scorer,
    prepare: Callable[[Any], tuple[Any, Any]],
    device: torch.device,
    timer: Callable[[], float],
    train_step: TrainStep | None,
) -> Timed:
    """Score ``model`` (in place, side-effect free) and train a copy of it on ``steps`` batches of ``batches``, each
    at its size and at a quarter of it, in alternating order; the first quarter of the batches warms up.

    Raises:
        ValueError: if ``batches`` ends before ``steps``, naming how many it had.
    """
    trainee = copy.deepcopy(model).to(device)
    optimizer = make_optimizer(trainee)
    seconds: dict[str, dict[int, list[float]]] = {"score": {}, "train": {}}
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    batch_size = 0
    for index in range(steps):
        batch = next(batches, None)
        if batch is None:
            raise ValueError(f"the loader ended after {index} batches: pass Measurement(steps=<at most {index}>)")
        inputs, targets = prepare(batch)
        n = _batch.sample_count(inputs) or 0
        batch_size = max(batch_size, n)
        small = max(1, n // 4)
        for size in (n, small) if index % 2 == 0 else (small, n):
            sub = torch.arange(size, device=device)
            x, y = _batch.select(inputs, sub), _batch.select(targets, sub)
            started = timer()
            scores = scorer(model, x, y, size, device)
            _record(seconds["score"], size, timer() - started, index, steps)
            if size == n:
                sums = sums + score_sums(scores).to(sums.device)
            started = timer()
            train_once(trainee, optimizer, scorer, x, y, train_step)
            _record(seconds["train"], size, timer() - started, index, steps)
    total, squares, count = sums.tolist()
    tau = tau_from_sums(total, squares, count) if count else 1.0
    return Timed(batch_size, tau, _medians(seconds["score"]), _medians(seconds["train"]))


def default_clock(device: torch.device) -> Callable[[], float]:
    """``time.thread_time`` on the CPU; ``time.perf_counter`` after a synchronisation on CUDA."""
    if device.type == "cuda":

        def synchronised() -> float:
            torch.cuda.synchronize(device)  # the advisor may wait: it is not a training step
            return time.perf_counter()

        return synchronised
    return time.thread_time


def _record(table: dict[int, list[float]], size: int, value: float, index: int, steps: int) -> None:
    if index >= steps // 4:  # the first quarter warms up (allocator, kernels, caches)
        table.setdefault(size, []).append(value)


def _medians(table: dict[int, list[float]]) -> dict[int, float]:
    return {size: sorted(values)[len(values) // 2] for size, values in table.items()}
