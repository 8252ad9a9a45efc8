"""Before training: will selection pay on *this* run? ``advise`` measures a few dozen steps of the user's own model.

It times, on the user's device and a copy of the user's model, the scoring pass and a training step at the loader's
batch size and at a quarter of it (interleaved, after a warm-up), fits a :class:`~sbdata.CostTable`, measures
the spread of the scores (``tau``, :func:`~sbdata.gain.tau_from_sums`) on those batches, and prices every keep with
the gain estimate of ``keep="auto"`` (``docs/method_card.md``, "Does selection pay?"), with and without a
``LossCache``. The model, its optimizer and the global RNGs are left as they were: training runs on a deep copy.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import sbdata.batch as _batch
from sbdata._util import model_device
from sbdata.auto import CostTable, score_sums, shrink_speedup, tau_from_sums
from sbdata.policies import keep_count
from sbdata.scoring import Scorer, per_sample_loss_fn

__all__ = ["Advice", "advise"]

MARGIN = 0.05  # a predicted speed-up must exceed 1 + MARGIN to be recommended (keep="auto"'s default margin)


@dataclass
class Advice:
    """What :func:`advise` measured and predicts.

    Attributes:
        batch: the loader's batch size B.
        batches_per_epoch: loader batches per epoch (``len(loader)``), or None if the loader has no length.
        costs: the fitted seconds of a scoring pass and of a training step (plus sbdata's overhead).
        tau: the variance-reduction factor of the measured scores (1: a flat spread).
        score_share: the scoring pass's share of a plain training step's seconds at B.
        rows: per option, ``{"option", "keep", "cache", "speedup", "seconds_per_epoch"}``; ``speedup`` is the
            predicted progress per second against training on whole batches, ``seconds_per_epoch`` the predicted
            seconds of one epoch (None without ``batches_per_epoch``).
        recommendation: one sentence: what to pass, and why, in numbers.
    """

    batch: int
    batches_per_epoch: int | None
    costs: CostTable
    tau: float
    score_share: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    recommendation: str = ""

    def __str__(self) -> str:
        lines = [
            f"batch {self.batch}: scoring is {self.score_share:.0%} of a training step; tau {self.tau:.2f}",
            f"{'option':<34}{'speed-up':>9}{'s/epoch':>10}",
        ]
        for row in self.rows:
            seconds = "" if row["seconds_per_epoch"] is None else f"{row['seconds_per_epoch']:.2f}"
            lines.append(f"{row['option']:<34}{row['speedup']:>8.2f}x{seconds:>10}")
        return "\n".join([*lines, self.recommendation])


def advise(
    loader: Iterable[Any],
    model: nn.Module,
    loss_fn: Any,
    *,
    steps: int = 32,
    keeps: tuple[float, ...] = (0.25, 0.5, 0.75),
    staleness: int = 2,
    score: str = "loss",
    make_optimizer: Callable[[Any], torch.optim.Optimizer] | None = None,
    split: Callable[[Any], tuple[Any, Any]] | None = None,
    device: torch.device | str | None = None,
    costs: CostTable | None = None,
    clock: Callable[[], float] | None = None,
) -> Advice:
    """Measure ``steps`` loader batches of the user's model and say whether, and how, selection pays.

    Args:
        loader: the training loader (any iterable of batches); ``steps`` batches are read from a new iterator.
        model: the user's model; it is copied for the training steps, and scored in place without side effects.
        loss_fn: the per-sample loss (as for :class:`~sbdata.SBLoader`).
        steps: loader batches to measure, an int >= 4. Default 32 (the first quarter warms up, untimed).
        keeps: the fixed shares to price, each in (0, 1]. Default (0.25, 0.5, 0.75).
        staleness: the ``LossCache`` staleness (epochs) to price; a cache then scores about ``1 / (staleness + 1)``
            of the samples. Default 2.
        score: ``"loss"`` or ``"gradnorm"``: what the spread is measured on (as ``score=``). Default ``"loss"``.
        make_optimizer: ``make_optimizer(parameters) -> optimizer`` for the timed training steps (use your own, as
            its step costs seconds too); default SGD with learning rate 0.
        split: ``split(batch) -> (inputs, targets)``; default as :class:`~sbdata.SBLoader`'s.
        device: where to run; default the model's.
        costs: a fixed cost table instead of timing (tests; a calibrated table); the spread is measured anyway.
        clock: seconds, for the timing; default ``time.thread_time`` on the CPU, ``time.perf_counter`` after a
            synchronisation on an accelerator.

    Raises:
        ValueError: for ``steps`` below 4, a share outside (0, 1], a negative ``staleness``, or a loader that ends
            before ``steps`` batches.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 4:
        raise ValueError(f"steps must be an int >= 4 (loader batches to measure), got {steps!r}")
    if not keeps or any(isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k <= 1 for k in keeps):
        raise ValueError(f"keeps must be shares in (0, 1], e.g. (0.25, 0.5), got {keeps!r}")
    if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
        raise ValueError(f"staleness must be an int >= 0 (epochs a cached loss stays usable), got {staleness!r}")
    place = torch.device(device) if device is not None else model_device(model)
    scorer = Scorer(loss_fn, score=score)
    split_fn = split if split is not None else _batch.default_split
    timer = clock if clock is not None else _default_clock(place)
    trainee = copy.deepcopy(model).to(place)
    optimizer = (make_optimizer or (lambda p: torch.optim.SGD(p, lr=0.0)))(trainee.parameters())
    per_sample = per_sample_loss_fn(loss_fn)
    seconds: dict[str, dict[int, list[float]]] = {"score": {}, "train": {}}
    sums = torch.zeros(3, dtype=torch.float64, device=place)
    batch_size = 0
    with torch.random.fork_rng(devices=[place] if place.type == "cuda" else []):
        batches = iter(loader)
        for index in range(steps):
            batch = next(batches, None)
            if batch is None:
                raise ValueError(f"the loader ended after {index} batches: pass steps <= {index}")
            inputs, targets = split_fn(_batch.to_device(batch, place))
            n = _batch.batch_size(inputs) or 0
            batch_size = max(batch_size, n)
            small = max(1, n // 4)
            for size in (n, small) if index % 2 == 0 else (small, n):
                sub = torch.arange(size, device=place)
                x, y = _batch.select(inputs, sub), _batch.select(targets, sub)
                started = timer()
                scores = scorer(model, x, y, size, place)
                _record(seconds["score"], size, timer() - started, index, steps)
                if size == n:
                    sums = sums + score_sums(scores).to(sums.device)
                started = timer()
                loss = per_sample(trainee(x), y).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                _record(seconds["train"], size, timer() - started, index, steps)
    total, squares, count = sums.tolist()
    measured_tau = tau_from_sums(total, squares, count) if count else 1.0
    table = costs if costs is not None else CostTable.fit(_medians(seconds["score"]), _medians(seconds["train"]))
    return _advice(loader, batch_size, table, measured_tau, keeps, staleness, score)


def _default_clock(device: torch.device) -> Callable[[], float]:
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


def _advice(
    loader: Any, batch: int, costs: CostTable, tau_: float, keeps: tuple[float, ...], staleness: int, score: str
) -> Advice:
    per_epoch = len(loader) if hasattr(loader, "__len__") else None
    reuse = staleness / (staleness + 1)
    rows: list[dict[str, Any]] = [
        {"option": "no selection", "keep": 1.0, "cache": False, "speedup": 1.0, "seconds_per_epoch": None}
    ]
    for keep in keeps:
        for cached in (False, True):
            r = reuse if cached else 0.0
            step = costs.score(batch) * (1 - r) + costs.train(keep_count(keep, batch)) + costs.overhead
            name = f"keep={keep}" + (f" + LossCache(staleness={staleness})" if cached else "")
            speedup = shrink_speedup(tau_, keep, batch, costs, r)
            rows.append({"option": name, "keep": keep, "cache": cached, "speedup": speedup, "seconds_per_epoch": step})
    plain = costs.train(batch)
    rows[0]["seconds_per_epoch"] = plain
    for row in rows:
        row["seconds_per_epoch"] = None if per_epoch is None else row["seconds_per_epoch"] * per_epoch
    share = costs.score(batch) / plain
    best = max(rows[1:], key=lambda row: row["speedup"])
    policy = 'policy="importance", score="gradnorm", return_weights=True' if score == "gradnorm" else "the default"
    if best["speedup"] > 1 + MARGIN:
        text = (
            f"select: {best['option']} ({policy}) is predicted {best['speedup']:.2f}x the progress per second of "
            f"whole batches now (tau {tau_:.2f}); keep='auto' follows the spread as it changes"
        )
    else:
        spread = "flat" if tau_ < 1.2 else "concentrated"
        text = (
            f"train on whole batches: the best option, {best['option']}, is predicted {best['speedup']:.2f}x here "
            f"(scoring is {share:.0%} of a step and the spread is {spread}, tau {tau_:.2f}); keep='auto' turns "
            "selection on if that changes later in training"
        )
    return Advice(batch, per_epoch, costs, tau_ if math.isfinite(tau_) else 1.0, share, rows, text)
