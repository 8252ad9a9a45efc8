"""Before training: what selection and a smaller batch can do on *this* run. ``advise`` measures a few dozen steps of
the user's own model.

It times, on the user's device and a copy of the user's model (with a copy of the user's optimizer, state included,
when given), the scoring pass and a training step at the loader's batch size and at a quarter of it (interleaved,
after a warm-up), fits a :class:`~sbdata.CostTable`, measures the spread of the scores (``tau``,
:func:`~sbdata.auto.tau_from_sums`) on those batches, and prices every keep, with and without a ``LossCache``, and
the small-batch control, each as a *range*: from the noise-dominated bound (progress proportional to the batch: the
lowest) to far above the critical batch (progress independent of the batch: only the seconds count). Where a
training run sits in that range, and what a biased policy such as top-k gains or loses, no estimate made before
training can know (``benchmarks/calibration`` measured top-k above the whole range, while random, priced the same,
never reached the user's accuracy): a range that straddles 1 means "measure it", which ``keep="auto"`` does on the
run. The model, its optimizer and the global RNGs are left as they were.
"""

from __future__ import annotations

import copy
import inspect
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import sbdata.batch as _batch
from sbdata._util import epoch_length, model_device
from sbdata.auto import CostTable, score_sums, small_batch_speedup, speedup_range, tau_from_sums
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
        steps: the loader batches measured.
        costs: the fitted seconds of a scoring pass and of a training step (plus sbdata's overhead).
        tau: the variance-reduction factor of the measured scores (1: a flat spread).
        score_share: the scoring pass's seconds as a share of a plain training step's at B.
        rows: per option, ``{"option", "keep", "cache", "low", "high", "seconds_per_epoch"}``: ``low`` and ``high``
            the predicted speed-up (progress per second against training on whole batches, > 1 pays) at the two
            ends of the range (noise-dominated; far above the critical batch), ``seconds_per_epoch`` the predicted
            seconds of one epoch (None without ``batches_per_epoch``). The option "smaller batch b" is the recipe
            at batch ``b = ceil(keep * B)`` on every sample (its learning rate retuned).
        recommendation: one sentence: what to do, and why, in numbers.
    """

    batch: int
    batches_per_epoch: int | None
    steps: int
    costs: CostTable
    tau: float
    score_share: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    recommendation: str = ""

    def __str__(self) -> str:
        lines = [
            f"batch {self.batch}, {self.steps} batches measured: scoring is {self.score_share:.0%} of a training step; "
            f"tau {self.tau:.2f} (1: the losses are spread flat)",
            "speed-up: predicted progress per second against whole batches (> 1 pays), from the noise-dominated "
            "bound (low) to far above the critical batch (high); s/epoch: predicted seconds per epoch",
            f"{'option':<36}{'low':>7}{'high':>7}{'s/epoch':>10}",
        ]
        for row in self.rows:
            seconds = "" if row["seconds_per_epoch"] is None else f"{row['seconds_per_epoch']:.2f}"
            lines.append(f"{row['option']:<36}{row['low']:>6.2f}x{row['high']:>6.2f}x{seconds:>10}")
        return "\n".join([*lines, self.recommendation])


def advise(
    loader: Iterable[Any],
    model: nn.Module,
    loss_fn: Any,
    *,
    steps: int | None = None,
    keeps: tuple[float, ...] = (0.25, 0.5, 0.75),
    staleness: int = 2,
    score: str = "loss",
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    split: Callable[[Any], tuple[Any, Any]] | None = None,
    device: torch.device | str | None = None,
    costs: CostTable | None = None,
    clock: Callable[[], float] | None = None,
) -> Advice:
    """Measure ``steps`` loader batches of the user's model and say what selection and a smaller batch can do.

    Args:
        loader: the training loader (any iterable of batches); ``steps`` batches are read from a new iterator.
        model: the user's model as it is (at the start, or mid-training); it is copied for the training steps, and
            scored in place without side effects.
        loss_fn: the per-sample loss (as for :class:`~sbdata.SBLoader`).
        steps: loader batches to measure, an int >= 4. Default None: 32, or ``len(loader)`` if the loader is
            shorter (at least 4); the number used is ``Advice.steps``.
        keeps: the fixed shares to price, each in (0, 1]. Default (0.25, 0.5, 0.75).
        staleness: the ``LossCache`` staleness (epochs) to price; a cache then scores about ``1 / (staleness + 1)``
            of the samples. Default 2.
        score: ``"loss"`` or ``"gradnorm"``: what the spread is measured on (as ``score=``). Default ``"loss"``.
        make_optimizer: ``make_optimizer(model) -> optimizer``, the convention of the examples (e.g.
            ``lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)``), for the timed training steps on the copy;
            its step costs seconds too. Default None: a copy of ``optimizer``, else SGD at learning rate 0.
        optimizer: the user's optimizer of ``model``: the copy's optimizer is of its class and hyper-parameters,
            its state (moments, step counts) loaded, so the timed steps are the user's as they are now. Not with
            ``make_optimizer``.
        split: ``split(batch) -> (inputs, targets)``; default as :class:`~sbdata.SBLoader`'s.
        device: where to run; default the model's.
        costs: a fixed cost table instead of timing (tests; a calibrated table); the spread is measured anyway.
        clock: seconds, for the timing; default ``time.thread_time`` on the CPU, ``time.perf_counter`` after a
            synchronisation on an accelerator.

    Raises:
        ValueError: for ``steps`` below 4 (or a loader of fewer than 4 batches), a share outside (0, 1], a
            negative ``staleness``, both optimizer arguments, or a loader that ends before ``steps`` batches.
    """
    if steps is None:
        length = epoch_length(loader)
        steps = 32 if length is None else min(32, length)
        if steps < 4:
            raise ValueError(f"advise needs at least 4 loader batches to measure; this loader has {length}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 4:
        raise ValueError(f"steps must be an int >= 4 (loader batches to measure), got {steps!r}")
    if not keeps or any(isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k <= 1 for k in keeps):
        raise ValueError(f"keeps must be shares in (0, 1], e.g. (0.25, 0.5), got {keeps!r}")
    if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
        raise ValueError(f"staleness must be an int >= 0 (epochs a cached loss stays usable), got {staleness!r}")
    if make_optimizer is not None and optimizer is not None:
        raise ValueError("pass make_optimizer= or optimizer=, not both: optimizer= copies your optimizer and its state")
    place = torch.device(device) if device is not None else model_device(model)
    scorer = Scorer(loss_fn, score=score)
    split_fn = split if split is not None else _batch.default_split
    timer = clock if clock is not None else _default_clock(place)
    trainee = copy.deepcopy(model).to(place)
    if optimizer is not None:
        trained = _copy_optimizer(optimizer, model, trainee)
    else:
        trained = (make_optimizer or (lambda m: torch.optim.SGD(m.parameters(), lr=0.0)))(trainee)
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
                trained.zero_grad(set_to_none=True)
                loss.backward()
                trained.step()
                _record(seconds["train"], size, timer() - started, index, steps)
    total, squares, count = sums.tolist()
    measured_tau = tau_from_sums(total, squares, count) if count else 1.0
    table = costs if costs is not None else CostTable.fit(_medians(seconds["score"]), _medians(seconds["train"]))
    return _advice(loader, batch_size, steps, table, measured_tau, keeps, staleness, score)


def _copy_optimizer(optimizer: torch.optim.Optimizer, model: nn.Module, copy_: nn.Module) -> torch.optim.Optimizer:
    """An optimizer of ``optimizer``'s class over ``copy_``'s parameters, with its param groups' hyper-parameters
    and its state (``copy_`` a deep copy of ``model``: parameters match by position).

    Raises:
        ValueError: if the optimizer holds a parameter that is not ``model``'s.
    """
    position = {id(p): i for i, p in enumerate(model.parameters())}
    mine = list(copy_.parameters())
    groups = []
    for group in optimizer.param_groups:
        missing = [p for p in group["params"] if id(p) not in position]
        if missing:
            raise ValueError(
                f"optimizer= holds {len(missing)} parameter(s) that are not the model's: pass the optimizer of the "
                "model given, or make_optimizer="
            )
        groups.append({**{k: v for k, v in group.items() if k != "params"},
                       "params": [mine[position[id(p)]] for p in group["params"]]})  # fmt: skip
    accepted = inspect.signature(type(optimizer)).parameters
    clone = type(optimizer)(groups, **{k: v for k, v in optimizer.defaults.items() if k in accepted})
    clone.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    return clone


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
    loader: Any,
    batch: int,
    steps: int,
    costs: CostTable,
    tau_: float,
    keeps: tuple[float, ...],
    staleness: int,
    score: str,
) -> Advice:
    per_epoch = epoch_length(loader)
    reuse = staleness / (staleness + 1)
    plain = costs.train(batch)
    rows: list[dict[str, Any]] = [
        {"option": "no selection", "keep": 1.0, "cache": False, "low": 1.0, "high": 1.0, "seconds_per_epoch": plain}
    ]
    for keep in keeps:
        for cached in (False, True):
            r = reuse if cached else 0.0
            step = costs.score(batch) * (1 - r) + costs.train(keep_count(keep, batch)) + costs.overhead
            name = f"keep={keep}" + (f" + LossCache(staleness={staleness})" if cached else "")
            low, high = speedup_range(tau_, keep, batch, costs, r)
            rows.append({"option": name, "keep": keep, "cache": cached, "low": low, "high": high,
                         "seconds_per_epoch": step})  # fmt: skip
    for keep in sorted({k for k in keeps if k < 1}):
        small = keep_count(keep, batch)
        low, high = small_batch_speedup(keep, batch, costs), small_batch_speedup(keep, batch, costs, 0.0)
        rows.append({"option": f"smaller batch {small} (no selection)", "keep": keep, "cache": False, "low": low,
                     "high": high, "seconds_per_epoch": costs.train(small) * batch / small})  # fmt: skip
    for row in rows:
        row["seconds_per_epoch"] = None if per_epoch is None else row["seconds_per_epoch"] * per_epoch
    share = costs.score(batch) / plain
    selection = [row for row in rows[1:] if not row["option"].startswith("smaller batch")]
    smaller = [row for row in rows if row["option"].startswith("smaller batch")]
    best = max(selection, key=lambda row: (row["low"], row["high"]))
    policy = 'policy="importance", score="gradnorm", return_weights=True' if score == "gradnorm" else "the default"
    spread = "flat" if tau_ < 1.2 else "concentrated"
    if best["low"] > 1 + MARGIN:
        text = (
            f"select: {best['option']} ({policy}) is predicted {best['low']:.2f}x-{best['high']:.2f}x the progress "
            f"per second of whole batches (tau {tau_:.2f}); keep='auto' checks it on your run"
        )
    elif max(row["high"] for row in selection) < 1:
        text = (
            f"train on whole batches: even where only seconds count, the best option, {best['option']}, is "
            f"predicted {max(row['high'] for row in selection):.2f}x (scoring is {share:.0%} of a step)"
        )
    else:
        text = (
            f"measure it: {best['option']} is predicted {best['low']:.2f}x-{best['high']:.2f}x (scoring is "
            f"{share:.0%} of a step, the spread {spread}, tau {tau_:.2f}); where in that range your run sits, and "
            "what top-k gains on your data, only a measurement tells: keep='auto' trials it on your run"
        )
    if smaller:
        top = max(smaller, key=lambda row: row["high"])
        text += (
            f"; a smaller batch may do as well without scoring: {top['option']} is predicted "
            f"{top['low']:.2f}x-{top['high']:.2f}x (retune its learning rate)"
        )
    return Advice(batch, per_epoch, steps, costs, tau_ if math.isfinite(tau_) else 1.0, share, rows, text)
