"""The calibrated cost model: an SB run's seconds, predicted from a few measured calls of this machine.

Forward-equivalents (:meth:`CostTable.forward_equivalents`) price compute on no machine in particular and are wrong on
real ones in ways that matter: a small batch does not cost its share of a large one, an optimizer step costs the same
whatever the batch, and every call has fixed costs. This model instead measures, once per machine and model, the
seconds of

- gathering a batch of b samples from the dataset: ``data[b]``;
- a training step (forward, backward, optimizer step) at each batch size the run trains at: ``train[b]``;
- a scoring forward (no grad, eval mode, per-sample loss) at each size it scores at: ``score[b]``;
- sbdata's own work per SB step beyond the scoring forward (selection, indexing, bookkeeping): ``overhead``;

and predicts the seconds of one loader batch of B samples as

- plain training: ``data[B] + train[B]``;
- an SB step keeping ``k = keep_count(keep, B)``: ``data[B] + score[B] + overhead + train[k]`` (shrunk batches),
  or ``data[B] + score[B] + overhead + (k / B) * train[B]`` with fixed-size output batches of B (``batch_size=B``);
- with a loss cache: ``score[bucket]`` averaged over the scoring sizes the run used, in place of ``score[B]``.

An epoch costs ``ceil(N / B)`` loader batches. :func:`calibration_calls` builds the calls to time; the caller times
them in its own timing loop (interleaved, after a warm-up, medians; one torch thread) and :func:`costs_from` turns the
medians into :class:`Costs`. The examples (the quickstart) and the benchmarks share this one model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Costs", "calibration_calls", "costs_from", "sb_step_seconds"]


@dataclass
class Costs:
    """Measured seconds per call on this machine: gathering a batch from the dataset, a training step (interleaved;
    ``plain``: timed back to back, as a plain loop runs them) and a scoring forward, by batch size, and sbdata's work
    per SB step beyond the scoring forward, by configuration name."""

    data: dict[int, float] = field(default_factory=dict)
    train: dict[int, float] = field(default_factory=dict)
    plain: dict[int, float] = field(default_factory=dict)
    score: dict[int, float] = field(default_factory=dict)
    overhead: dict[str, float] = field(default_factory=dict)

    SIZED = ("data", "train", "plain", "score")  # the tables keyed by batch size

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in (*self.SIZED, "overhead")}

    @classmethod
    def from_dict(cls, table: dict) -> Costs:
        """The inverse of :meth:`as_dict`, also after a JSON round trip (batch sizes come back as strings)."""
        sized = {name: {int(size): float(value) for size, value in table.get(name, {}).items()} for name in cls.SIZED}
        return cls(**sized, overhead={str(k): float(v) for k, v in table.get("overhead", {}).items()})

    def plain_step(self, batch: int) -> float:
        """Predicted seconds of one plain training step at ``batch``, data included: training steps timed back to
        back where measured (as a plain loop runs them), else interleaved with the other calls."""
        return self.data.get(batch, 0.0) + self.plain.get(batch, self.train[batch])


def calibration_calls(
    make_model: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    train_sizes: list[int],
    score_sizes: list[int],
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None,
    engine_steps: dict[str, Callable[[], Any]] | None = None,
    engine_batch: int | None = None,
    data_calls: dict[int, Callable[[], Any]] | None = None,
) -> dict[str, Callable[[], Any]]:
    """The calls whose median seconds make :class:`Costs` (for :func:`costs_from`), by name: ``"data b"``,
    ``"train b"``, ``"score b"`` and ``"engine name"``.

    Args:
        make_model: a fresh model (trained on its own copy, so the caller's stays untouched).
        x, y: inputs and targets to slice batches from (at least the largest size).
        train_sizes, score_sizes: the batch sizes to measure.
        make_optimizer: the training recipe's optimizer; default AdamW(lr=1e-3).
        engine_steps: by configuration name, one SB step of that configuration's engine on a ready batch of
            ``engine_batch`` samples (e.g. ``lambda: engine.process(batch)``); its time minus ``score[engine_batch]``
            is that configuration's ``overhead``.
        engine_batch: the batch size of ``engine_steps``' batches (scored too, for the overhead); needed with them.
        data_calls: by batch size, how the run gets one batch (e.g. ``lambda: next(iter(loader))``); default a
            gather of random rows of ``x`` and ``y``.

    Raises:
        ValueError: for ``engine_steps`` without ``engine_batch``.
    """
    if engine_steps and engine_batch is None:
        raise ValueError("calibration_calls got engine_steps without engine_batch: pass the size of their batches")
    model = make_model()
    optimizer = (make_optimizer or (lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)))(model)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    engine_steps = engine_steps or {}

    def gather(b: int) -> Callable[[], Any]:
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
    scores = sorted(set(score_sizes) | ({engine_batch} if engine_steps and engine_batch is not None else set()))
    calls: dict[str, Callable[[], Any]] = {f"data {b}": (data_calls or {}).get(b) or gather(b) for b in trains}
    calls.update({f"train {b}": train(b) for b in trains})
    calls.update({f"score {b}": score(b) for b in scores})
    calls.update({f"engine {name}": step for name, step in engine_steps.items()})
    return calls


def costs_from(seconds: dict[str, float], engine_batch: int | None = None) -> Costs:
    """:class:`Costs` from the median seconds of :func:`calibration_calls`' calls, by name (``"train 256"``, ...)."""
    costs = Costs()
    for name, value in seconds.items():
        kind, _, key = name.partition(" ")
        if kind == "engine":
            costs.overhead[key] = max(0.0, value - seconds[f"score {engine_batch}"])
        elif kind in Costs.SIZED:
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
    costs: Costs, batch: int, kept: int, *, overhead: str, fixed: bool = False, scored: dict[int, float] | None = None
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
