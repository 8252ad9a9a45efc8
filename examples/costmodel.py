"""A calibrated cost model: an SB run's seconds, predicted from a few measured step costs of this machine.

Forward-equivalents (a scoring forward = 1 per sample, a trained sample = 3) price compute on no machine in
particular and are wrong on real ones in ways that matter: a small batch does not cost its share of a large one,
an optimizer step costs the same whatever the batch, and every call has fixed costs. This model instead measures,
once per machine and model, the seconds of

- gathering a batch of b samples from the dataset: ``data[b]``;
- a training step (forward, backward, optimizer step) at each batch size the run trains at: ``train[b]``;
- a scoring forward (no grad, eval mode, per-sample loss) at each size it scores at: ``score[b]``;
- sbdata's own work per SB step beyond the scoring forward (selection, indexing, bookkeeping): ``overhead``;

and predicts the seconds of one loader batch of B samples as

- plain training: ``data[B] + train[B]``;
- an SB step keeping ``k = keep_count(keep, B)``: ``data[B] + score[B] + overhead + train[k]`` (shrunk batches),
  or ``data[B] + score[B] + overhead + (k / B) * train[B]`` with fixed-size output batches of B (``batch_size=B``);
- with a loss cache: ``score[bucket]`` averaged over the scoring sizes the run used, in place of ``score[B]``.

An epoch costs ``ceil(N / B)`` loader batches. Timings are medians over calls interleaved one by one after a
warm-up; use one torch thread and, for stable numbers, the allocator pinning of ``benchmarks/harness/timing.py``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Costs", "calibrate", "costs_from", "interleaved", "sb_step_seconds"]


@dataclass
class Costs:
    """Measured seconds per call on this machine: gathering a batch from the dataset, a training step and a scoring
    forward, by batch size, and sbdata's work per SB step beyond the scoring forward, by configuration name."""

    data: dict[int, float] = field(default_factory=dict)
    train: dict[int, float] = field(default_factory=dict)
    plain: dict[int, float] = field(default_factory=dict)  # training steps timed back to back (a plain loop)
    score: dict[int, float] = field(default_factory=dict)
    overhead: dict[str, float] = field(default_factory=dict)

    SIZED = ("data", "train", "plain", "score")  # the tables keyed by batch size

    def as_dict(self) -> dict:
        names = ("data", "train", "plain", "score", "overhead")
        return {name: getattr(self, name) for name in names}

    @classmethod
    def from_dict(cls, table: dict) -> Costs:
        """The inverse of :meth:`as_dict`, also after a JSON round trip (batch sizes come back as strings)."""
        sized = {name: {int(size): float(value) for size, value in table.get(name, {}).items()} for name in cls.SIZED}
        return cls(**sized, overhead={str(k): float(v) for k, v in table.get("overhead", {}).items()})

    def plain_step(self, batch: int) -> float:
        """Predicted seconds of one plain training step at ``batch``, data included: training steps timed back to
        back where measured (as a plain loop runs them), else interleaved with the other calls."""
        return self.data.get(batch, 0.0) + self.plain.get(batch, self.train[batch])


def interleaved(calls: dict[str, Callable[[], None]], *, block: int, rounds: int, clock=time.perf_counter) -> dict:
    """Median seconds per call of each function. Calls are interleaved one by one (each round runs every function
    ``block`` times in turn, the order rotating every round), after one warm-up call each: so each call finds the
    caches as the other calls left them, as in a training loop, and a load change on a shared machine hits every
    function alike."""
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        calls[name]()
    for r in range(rounds * block):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            started = clock()
            calls[name]()
            times[name].append(clock() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def calibrate(
    make_model: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    train_sizes: list[int],
    score_sizes: list[int],
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None,
    engine_steps: dict[str, Callable[[], None]] | None = None,
    engine_batch: int | None = None,
    data_calls: dict[int, Callable[[], None]] | None = None,
    block: int = 8,
    rounds: int = 5,
    clock=time.perf_counter,
    measure: bool = True,
) -> Costs:
    """Measure :class:`Costs` for a model on samples of ``x``/``y`` (at least the largest size).

    Args:
        make_model: a fresh model (trained on copies, so the caller's stays untouched).
        x, y: inputs and targets to slice batches from.
        train_sizes, score_sizes: the batch sizes to measure.
        make_optimizer: the training recipe's optimizer; default AdamW(lr=1e-3).
        engine_steps: by configuration name, one SB step of that configuration's engine on a ready batch of
            ``engine_batch`` samples (e.g. ``lambda: engine.process(batch)``); its time minus
            ``score[engine_batch]`` is that configuration's ``overhead``.
        data_calls: by batch size, how the run gets one batch (e.g. ``lambda: next(iter(loader))``); default a
            gather of random rows of ``x`` and ``y``.
        block, rounds: each round calls every function ``block`` times, interleaved one by one.
        clock: the timer; ``time.thread_time`` on a shared CPU machine.
        measure: False returns the calls by name instead, for :func:`costs_from` after timing them elsewhere.
    """
    model = make_model()
    optimizer = (make_optimizer or (lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)))(model)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    engine_steps = engine_steps or {}

    def gather(b: int) -> Callable[[], None]:
        return lambda: (x[order[:b]], y[order[:b]])

    def train(b: int) -> Callable[[], None]:
        def step() -> None:
            model.train()
            loss = F.cross_entropy(model(x[:b]), y[:b])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step

    def score(b: int) -> Callable[[], None]:
        def forward() -> None:
            model.eval()
            with torch.no_grad():
                F.cross_entropy(model(x[:b]), y[:b], reduction="none")
            model.train()

        return forward

    trains = sorted(set(train_sizes))
    scores = sorted(set(score_sizes) | ({engine_batch} if engine_steps else set()))
    calls = {f"data {b}": (data_calls or {}).get(b) or gather(b) for b in trains}
    calls.update({f"train {b}": train(b) for b in trains})
    calls.update({f"score {b}": score(b) for b in scores})
    calls.update({f"engine {name}": step for name, step in engine_steps.items()})
    if not measure:
        return calls  # type: ignore[return-value]
    return costs_from(interleaved(calls, block=block, rounds=rounds, clock=clock), engine_batch)


def costs_from(seconds: dict[str, float], engine_batch: int | None = None) -> Costs:
    """:class:`Costs` from the median seconds of :func:`calibrate`'s calls (``measure=False`` gives the calls, to
    interleave them with other timings)."""
    costs = Costs()
    for name, value in seconds.items():
        kind, _, key = name.partition(" ")
        if kind == "engine":
            costs.overhead[key] = max(0.0, value - seconds[f"score {engine_batch}"])
        elif kind in ("data", "train", "plain", "score"):
            getattr(costs, kind)[int(key)] = value
    return costs


def _at(table: dict[int, float], size: int) -> float:
    """``table[size]``, or a linear interpolation between the measured sizes around it (extrapolated at the ends)."""
    if size in table:
        return table[size]
    sizes = sorted(table)
    if len(sizes) == 1:
        return table[sizes[0]] * size / sizes[0]
    low = max([s for s in sizes if s < size] or sizes[:1])
    high = min([s for s in sizes if s > size and s != low] or sizes[-1:])
    if high == low:
        low = sizes[-2]
    return table[low] + (table[high] - table[low]) * (size - low) / (high - low)


def sb_step_seconds(
    costs: Costs,
    batch: int,
    kept: int,
    *,
    overhead: str,
    fixed: bool = False,
    scored: dict[int, float] | None = None,
) -> float:
    """Predicted seconds of one SB loader batch of ``batch`` samples keeping ``kept`` (see the module docstring).

    Args:
        overhead: the configuration whose measured ``overhead`` applies.
        fixed: output batches of ``batch`` (pooled) rather than shrunk batches of ``kept``.
        scored: for a cached run, the share of SB steps that scored at each size (0: nothing scored); default
            every step scores the whole batch.
    """
    mix = scored if scored is not None else {batch: 1.0}
    scoring = sum(share * _at(costs.score, size) for size, share in mix.items() if size)
    training = kept / batch * costs.train[batch] if fixed else costs.train[kept]
    return costs.data.get(batch, 0.0) + scoring + costs.overhead[overhead] + training
