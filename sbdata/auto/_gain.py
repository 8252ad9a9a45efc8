"""Does selection pay? The gain estimate as pure functions (derivation: ``docs/method_card.md``).

A batch's per-sample scores ``s`` (losses by default) give importance sampling's variance-reduction factor
``tau = sqrt(mean(s^2)) / mean(s)`` (Katharopoulos & Fleuret 2018; 1 for a flat spread, larger the more the scores
concentrate). Drawing ``k`` of ``B`` candidates without replacement in proportion to the gradient norm makes an
effective uniform batch ``b_eff`` with ``1/b_eff = 1/B + (B - k) / ((B - 1) k tau^2)`` (:func:`effective_batch`:
``B`` itself at ``k = B``). Progress per step at batch ``b`` is ``1 / (1 + B_noise / b)`` of the noiseless step
(McCandlish et al. 2018; ``B_noise`` the gradient noise scale, the critical batch): in the noise-dominated regime
(``B_noise`` far above ``B``) progress is proportional to the batch, above the critical batch it barely depends on
it. The estimate cannot know ``B_noise``, nor what a *biased* policy (top-k, rank) gains or loses, so every
speed-up here takes ``noise_scale`` (default infinite: the noise-dominated bound, the lowest) and prices unbiased
sampling; :func:`speedup_range` gives both ends. ``keep="auto"`` does not rely on it: it measures
(``sbdata.auto``'s trials). :func:`small_batch_speedup` prices the other way to spend less per sample: the
recipe at a smaller batch. Every function here is host arithmetic except :func:`score_sums`, which stays on the
scores' device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sbdata.policies import keep_count

__all__ = [
    "CostTable",
    "score_sums",
    "small_batch_speedup",
    "speedup_range",
    "tau_from_sums",
]


@dataclass(frozen=True)
class CostTable:
    """Seconds of the calls a step is made of, as linear fits in the number of samples ``n``.

    Attributes:
        score_per_sample: seconds per sample of the scoring pass (no-grad forward and selection), >= 0.
        train_per_sample: seconds per sample of the user's training step (forward, backward, optimizer), >= 0.
        score_fixed: seconds per scoring call whatever its size, >= 0. Default 0.
        train_fixed: seconds per training step whatever its size (e.g. the optimizer step), >= 0. Default 0.
        overhead: sbdata's seconds per SB step beyond scoring (bookkeeping), >= 0. Default 0.
    """

    score_per_sample: float
    train_per_sample: float
    score_fixed: float = 0.0
    train_fixed: float = 0.0
    overhead: float = 0.0

    def __post_init__(self) -> None:
        for name in ("score_per_sample", "train_per_sample", "score_fixed", "train_fixed", "overhead"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"CostTable.{name} must be a finite number of seconds >= 0, got {value!r}")
        if self.train(1) <= 0:
            raise ValueError(
                "CostTable needs a training step that costs something: train_per_sample or train_fixed > 0"
            )

    @classmethod
    def forward_equivalents(cls, score: float = 1.0) -> CostTable:
        """The machine-free model: a scored sample costs ``score`` forward (1 by default), a trained one 3."""
        return cls(score_per_sample=score, train_per_sample=3.0)

    @classmethod
    def fit(cls, score: dict[int, float], train: dict[int, float], overhead: float = 0.0) -> CostTable:
        """Least-squares lines through measured seconds per call by batch size (``examples/costmodel.py``'s, or
        advise's medians); one size gives a line through the origin. Negative fits clip to 0."""
        (s_fixed, s_per), (t_fixed, t_per) = _line(score, "score"), _line(train, "train")
        return cls(s_per, t_per, s_fixed, t_fixed, overhead)

    def score(self, n: float) -> float:
        """Seconds to score ``n`` samples."""
        return self.score_fixed + self.score_per_sample * n

    def train(self, n: float) -> float:
        """Seconds of a training step on ``n`` samples."""
        return self.train_fixed + self.train_per_sample * n

    # The one price of an SB step: auto's trials, the gain estimate and advise read it.
    def sb_step(self, batch: float, kept: float, reuse: float = 0.0) -> StepPrice:
        """An SB step on a loader batch of ``batch`` samples that trains ``kept`` of them: scoring the batch (less
        the share ``reuse`` in [0, 1] a loss cache supplies without a forward), training on the kept samples, and
        sbdata's own work: ``score(batch) (1 - reuse) + train(kept) + overhead`` seconds."""
        return StepPrice(self.score(batch) * (1 - reuse), self.train(kept), self.overhead)


@dataclass(frozen=True)
class StepPrice:
    """Seconds of one SB step by part (:meth:`CostTable.sb_step`).

    Attributes:
        scoring: the scoring forward(s), >= 0.
        training: the training step on the kept samples, > 0.
        overhead: sbdata's own work beyond scoring, >= 0.
    """

    scoring: float
    training: float
    overhead: float

    @property
    def seconds(self) -> float:
        """The whole step: ``scoring + training + overhead``."""
        return self.scoring + self.training + self.overhead


def _line(points: dict[int, float], name: str) -> tuple[float, float]:
    if not points:
        raise ValueError(f"CostTable.fit needs at least one {name} measurement, got none")
    sizes = sorted(points)
    if len(sizes) == 1:
        return 0.0, max(0.0, points[sizes[0]] / sizes[0])
    mean_n = sum(sizes) / len(sizes)
    mean_t = sum(points[n] for n in sizes) / len(sizes)
    slope = sum((n - mean_n) * (points[n] - mean_t) for n in sizes) / sum((n - mean_n) ** 2 for n in sizes)
    slope = max(0.0, slope)
    return max(0.0, mean_t - slope * mean_n), slope


def score_sums(scores: torch.Tensor) -> torch.Tensor:
    """``[sum(s), sum(s^2), count]`` of the finite scores, negatives clipped to 0: float64 on the scores' device.

    Non-finite scores are left out without reading anything on the host (no synchronisation).
    """
    s = scores.detach().to(torch.float64)
    finite = torch.isfinite(s)
    clean = torch.where(finite, s, 0.0).clamp_(min=0.0)
    return torch.stack([clean.sum(), (clean * clean).sum(), finite.sum(dtype=torch.float64)])


def tau_from_sums(total: float, squares: float, count: float) -> float:
    """``sqrt(mean(s^2)) / mean(s)`` from the sums; 1 (no gain) when there is nothing, or only zeros."""
    if count <= 0 or total <= 0:
        return 1.0
    return max(1.0, math.sqrt(count * squares) / total)  # >= 1 by Cauchy-Schwarz; max() absorbs rounding


def effective_batch(candidates: float, kept: float, tau_: float) -> float:
    """The uniform batch whose gradient estimate has the variance of ``kept`` of ``candidates`` drawn by importance
    without replacement: ``1 / (1/B + (B - k) / ((B - 1) k tau^2))`` (``B`` at ``k = B``; ``k`` at ``tau = 1`` for
    large ``B``)."""
    if kept >= candidates:
        return float(candidates)
    correction = (candidates - kept) / (candidates - 1) if candidates > 1 else 1.0
    return 1.0 / (1.0 / candidates + correction / (kept * tau_ * tau_))


def progress(batch: float, noise_scale: float) -> float:
    """Progress of a step at ``batch`` against the noiseless step: ``1 / (1 + noise_scale / batch)``; proportional
    to ``batch`` (divided by ``noise_scale``) when ``noise_scale`` is infinite."""
    return batch if math.isinf(noise_scale) else 1.0 / (1.0 + noise_scale / batch)


def _progress_ratio(b_eff: float, batch: float, noise_scale: float) -> float:
    return progress(b_eff, noise_scale) / progress(batch, noise_scale)


def shrink_speedup(
    tau_: float, keep: float, batch: int, costs: CostTable, reuse: float = 0.0, noise_scale: float = math.inf
) -> float:
    """Predicted progress per second of training ``k = keep_count(keep, batch)`` of each loader batch, against the
    plain step on the whole batch (> 1: selection pays).

    ``[P(b_eff) / P(B)] * train(B) / (score(B) (1 - reuse) + train(k) + overhead)``, with ``P`` :func:`progress`
    at ``noise_scale`` (default infinite: ``b_eff / B``) and ``reuse`` the share of scores a ``LossCache`` supplies
    without a forward, in [0, 1].
    """
    k = keep_count(keep, batch)
    ratio = _progress_ratio(effective_batch(batch, k, tau_), batch, noise_scale)
    return ratio * costs.train(batch) / costs.sb_step(batch, k, reuse).seconds


def small_batch_speedup(keep: float, batch: int, costs: CostTable, noise_scale: float = math.inf) -> float:
    """Predicted progress per second of the recipe at batch ``b = keep_count(keep, batch)`` (more steps, every
    sample), against batch ``batch``: ``[P(b) / P(B)] * train(B) / train(b)``. 1 at an infinite ``noise_scale``
    without fixed costs; up to ``train(B) / train(b)`` far above the critical batch. The LR must follow the batch."""
    small = keep_count(keep, batch)
    return _progress_ratio(small, batch, noise_scale) * costs.train(batch) / costs.train(small)


def speedup_range(tau_: float, keep: float, batch: int, costs: CostTable, reuse: float = 0.0) -> tuple[float, float]:
    """:func:`shrink_speedup`'s two ends: noise-dominated (``noise_scale`` infinite, the lower) and far above the
    critical batch (``noise_scale`` 0: progress independent of the batch, only the seconds count)."""
    return (shrink_speedup(tau_, keep, batch, costs, reuse), shrink_speedup(tau_, keep, batch, costs, reuse, 0.0))


def score_share(keep: float, batch: int, costs: CostTable, reuse: float = 0.0) -> float:
    """The scoring pass's share of the seconds of an SB step on a loader batch of ``batch`` samples, in [0, 1]."""
    price = costs.sb_step(batch, keep_count(keep, batch), reuse)
    scoring, rest = price.scoring, price.training + price.overhead
    return scoring / (scoring + rest) if scoring + rest > 0 else 0.0
