"""Branch trials: every option trained on its own copy of the user's model and optimizer, from the same state over
the same loader batches, and measured on held-out batches that no branch trains on.

A *branch* is one option (an :class:`Arm`): whole batches (``"plain"``), top-k at a share (``"topk"``, the default
policy), its control ``"random"`` at the same share (same steps, same samples per step), or the small-batch control
``"small"`` (the recipe at batch ``ceil(keep * B)`` on every sample: more steps, the user's learning rate). Each
branch records its *curve*: the mean quality on the probe (the user's metric as ``Scorer.quality`` tells it:
accuracy for ``(N, C)`` logits against class indices, minus the per-sample loss otherwise) after every checkpoint,
against the seconds its steps took (measured, or priced by a fixed :class:`~sbdata.CostTable`).

The measured speed-up (:func:`measured_speedup`) is time to a common quality: the lower of the two final qualities,
reached first by each curve (running maximum, linear between checkpoints); plain's seconds to it over the arm's.
The maths is pure; a :class:`Branch` trains one option.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import sbdata.batch as _batch
from sbdata.auto import CostTable
from sbdata.policies import RandomK, SelectionPolicy, TopK, keep_count
from sbdata.scoring import Scorer

ARMS = ("plain", "topk", "random", "small")


@dataclass(frozen=True)
class Arm:
    """One option of a branch trial.

    Attributes:
        kind: one of :data:`ARMS`.
        keep: the share kept per loader batch (``"topk"``, ``"random"``), or the small batch's share of B
            (``"small"``: batch ``ceil(keep * B)``), in (0, 1]; 1.0 for ``"plain"``.
    """

    kind: str
    keep: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ARMS:
            raise ValueError(f"Arm.kind must be one of {ARMS}, got {self.kind!r}")
        if not 0 < self.keep <= 1:
            raise ValueError(f"Arm.keep must be in (0, 1], got {self.keep!r}")

    def name(self, batch: int) -> str:
        """How the option is printed, e.g. ``"top-k keep=0.25"`` or ``"smaller batch 64"``."""
        if self.kind == "plain":
            return "no selection"
        if self.kind == "small":
            return f"smaller batch {keep_count(self.keep, batch)}"
        return f"{'top-k' if self.kind == 'topk' else 'random'} keep={self.keep:g}"


@dataclass(frozen=True)
class Curve:
    """A branch's probe quality after each checkpoint.

    Attributes:
        seconds: the branch's training seconds up to each checkpoint, the first 0.0 (the shared start).
        quality: the probe's mean quality at each checkpoint (higher is better).
    """

    seconds: tuple[float, ...]
    quality: tuple[float, ...]


def reach_time(curve: Curve, target: float) -> float:
    """Seconds at which ``curve`` first reaches ``target`` (its running maximum, linear between checkpoints); 0.0 if
    it starts there, ``inf`` if it never does."""
    best_t, best_q = 0.0, -math.inf  # the running maximum so far
    for t, q in zip(curve.seconds, curve.quality, strict=True):
        if q >= target:
            if best_q == -math.inf:
                return t
            return best_t + (target - best_q) / (q - best_q) * (t - best_t)
        if q > best_q:
            best_t, best_q = t, q
    return math.inf


def measured_speedup(plain: Curve, arm: Curve) -> float:
    """Plain's seconds to the common quality over the arm's (> 1: the arm is faster).

    The common quality is the lower of the two final qualities. An arm that ends no higher than the shared start
    measures 0.0 (it never got anywhere); where plain ends no higher than the start and the arm does, ``inf``.
    """
    start = plain.quality[0]
    if arm.quality[-1] <= start:
        return 0.0
    if plain.quality[-1] <= start:
        return math.inf
    target = min(plain.quality[-1], arm.quality[-1])
    mine = reach_time(arm, target)
    return reach_time(plain, target) / mine if mine > 0 else math.inf


def paired_se(a: torch.Tensor, b: torch.Tensor) -> float:
    """The standard error of ``mean(a - b)`` over paired per-sample qualities (the same probe samples); NaN for
    fewer than two."""
    diff = (a.double() - b.double()).flatten()
    if diff.numel() < 2:
        return math.nan
    return float(diff.std(unbiased=True)) / math.sqrt(diff.numel())


class Branch:
    """One option of a branch trial, trained on its own copy of the user's model and optimizer.

    The branches of a trial step in turn on each loader batch as it arrives (so only one batch is held, and their
    seconds are measured side by side); memory: one copy of the model and of the optimizer per branch.

    Args:
        arm: the option.
        model: the user's model; copied (parameters, buffers, train/eval mode), never changed.
        make_optimizer: the copy's optimizer (a copy of the user's, state included, or the user's factory).
        scorer: the scoring pass (side-effect free): the selection arms' scores and the probe's quality; its
            ``training_losses`` (the same forward, loss and reduce, with the graph) are what the default step trains.
        device: where to run.
        seed: the generator of ``"random"``.
        train_step: ``train_step(model, optimizer, inputs, targets)``, one training step as the user takes it (AMP,
            gradient clipping, accumulation); None: :func:`train_once`'s default.
    """

    def __init__(
        self,
        arm: Arm,
        model: nn.Module,
        make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
        *,
        scorer: Scorer,
        device: torch.device,
        seed: int = 0,
        train_step: Callable[[nn.Module, torch.optim.Optimizer, Any, Any], Any] | None = None,
    ) -> None:
        self.arm, self.scorer, self.device = arm, scorer, device
        self.train_step = train_step
        self.model = copy.deepcopy(model).to(device)
        self.optimizer = make_optimizer(self.model)
        self.policy: SelectionPolicy = TopK() if arm.kind == "topk" else RandomK()
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.priced = 0.0  # with a cost table: the exact sum of the priced steps
        self.durations: list[float] = []  # measured: each step's seconds
        self.checkpoints: list[tuple[int, float]] = []  # (steps taken, priced seconds) at each measurement
        self.qualities: list[float] = []

    def step(self, inputs: Any, targets: Any, timer: Callable[[], float], costs: CostTable | None = None) -> None:
        """Train on one loader batch as the option does; its seconds (``timer`` around the step, scoring and
        selection included; or priced by ``costs``) are recorded."""
        n = _batch.sample_count(inputs) or 0
        started = timer()
        priced = 0.0
        if self.arm.kind == "plain":
            self._train(inputs, targets)
            priced = costs.train(n) if costs is not None else 0.0
        elif self.arm.kind == "small":
            size = keep_count(self.arm.keep, n)
            for start in range(0, n, size):
                stop = min(n, start + size)
                self._train(_batch.take(inputs, start, stop), _batch.take(targets, start, stop))
                priced += costs.train(stop - start) if costs is not None else 0.0
        else:
            scores = self.scorer(self.model, inputs, targets, n, self.device)
            kept = self.policy.select(scores, self.arm.keep, self.generator).index
            self._train(_batch.select(inputs, kept), _batch.select(targets, kept))
            priced = costs.sb_step(n, kept.numel()).seconds if costs is not None else 0.0
        if costs is not None:
            self.priced += priced
        else:
            self.durations.append(timer() - started)

    def measure(self, probe: Sequence[tuple[Any, Any]]) -> torch.Tensor:
        """The probe's per-sample quality now (side-effect free), recorded as a checkpoint of the curve."""
        parts = [self.scorer.quality(self.model, x, y, _batch.sample_count(x) or 0, self.device) for x, y in probe]
        quality = torch.cat(parts).detach().cpu()
        self.checkpoints.append((len(self.durations), self.priced))
        self.qualities.append(float(quality.double().mean()))
        return quality

    @property
    def curve(self) -> Curve:
        """The checkpoints so far. Measured seconds are the steps taken times the median step's seconds (a garbage
        collection or another process's burst moves a median little and a sum much); priced ones the exact sum."""
        if self.durations:
            ordered = sorted(self.durations)
            median = ordered[len(ordered) // 2]
            return Curve(tuple(steps * median for steps, _ in self.checkpoints), tuple(self.qualities))
        return Curve(tuple(priced for _, priced in self.checkpoints), tuple(self.qualities))

    def _train(self, inputs: Any, targets: Any) -> None:
        train_once(self.model, self.optimizer, self.scorer, inputs, targets, self.train_step)


def train_once(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scorer: Scorer,
    inputs: Any,
    targets: Any,
    train_step: Callable[[nn.Module, torch.optim.Optimizer, Any, Any], Any] | None = None,
) -> None:
    """One training step, as ``advise`` takes each (its timed steps and every branch's): the user's ``train_step``,
    or ``zero_grad``, the mean of ``scorer.training_losses`` (the scores' forward, loss and reduce, with the graph),
    ``backward``, ``step``."""
    if train_step is not None:
        train_step(model, optimizer, inputs, targets)
        return
    optimizer.zero_grad(set_to_none=True)
    scorer.training_losses(model, inputs, targets, _batch.sample_count(inputs) or 0).mean().backward()
    optimizer.step()
