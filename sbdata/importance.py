"""Importance sampling: keep samples with probability proportional to their score (Katharopoulos & Fleuret 2018).

"Not All Samples Are Created Equal" samples a batch with probability proportional to an upper bound of each
sample's gradient norm and reweights it so that the gradient stays unbiased. :class:`ImportanceSampling` draws
``keep_count(keep, N)`` of ``N`` scored candidates without replacement, with probability proportional to the score
(the loss, or with ``score="gradnorm"`` the norm of the loss's gradient with respect to the model's outputs, the
paper's bound up to the last layer's Lipschitz constant), mixed with a uniform share ``smoothing``. It draws by
Gumbel-top-k on the device, so the kept count is known on the host and nothing synchronises; the inclusion
probability it reports is the priority-sampling one (conditional on the (k+1)-th perturbed key; Kool et al. 2019),
whose Horvitz-Thompson weights ``return_weights=True`` turns into an unbiased estimate of the candidates' mean loss
(and so of the full-batch gradient).
"""

from __future__ import annotations

import math

import torch

from .policies import Selection, SelectionPolicy, gumbel_top_k, keep_count

__all__ = ["FLOOR", "ImportanceSampling", "importance_log_weights"]

FLOOR = 1e-6
"""The least sampling share of a sample, as a fraction of the uniform share ``1/N``: a zero score still leaves a
fixed count fillable and every inclusion probability positive (so every Horvitz-Thompson weight is finite)."""


def importance_log_weights(scores: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
    """Log of each sample's sampling share ``p_i = (1 - smoothing) * s_i / sum(s) + smoothing / N``.

    Args:
        scores: (N,) per-sample scores, N >= 1, any float dtype (integers are read as float32). Scores that are
            NaN, -inf, zero or negative count as 0; +inf (a loss the engine treats as the hardest under
            ``nan_policy="keep"``) counts as the batch's largest finite score. If every score counts as 0, the
            shares are uniform.
        smoothing: the uniform share mixed in, in [0, 1]; 0 samples proportionally to the score, 1 uniformly.

    Returns:
        (N,) log shares (they sum to 1 up to the floor), each at least ``log(FLOOR / N)``; on the scores' device,
        with no synchronisation.
    """
    n = scores.shape[0]
    values = scores if scores.dtype in (torch.float32, torch.float64) else scores.to(torch.float32)
    finite = torch.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0).clamp_min(0.0)
    values = torch.where(values == math.inf, finite.max(), finite)
    total = values.sum()
    share = torch.where(total > 0, values / torch.where(total > 0, total, 1.0), 1.0 / n)
    if smoothing:
        share = (1.0 - smoothing) * share + smoothing / n
    return torch.log(share.clamp_min(FLOOR / n))


class ImportanceSampling(SelectionPolicy):
    """``keep_count(keep, N)`` samples without replacement, with probability proportional to the score.

    Each successive draw picks a remaining sample with probability proportional to its share
    ``(1 - smoothing) * s_i / sum(s) + smoothing / N`` (see :func:`importance_log_weights` for zero, negative and
    non-finite scores). ``Selection.prob`` holds each kept sample's inclusion probability conditional on the
    (k+1)-th perturbed key (priority sampling), so ``return_weights=True`` gives unbiased Horvitz-Thompson weights.
    Pair it with ``score="gradnorm"`` for the paper's variance-reducing distribution, or the default loss score.

    With ``smoothing > 0`` every sample's share is at least ``smoothing / N``, which bounds the weights (a kept
    sample's weight is then of the order of ``1 / (k * smoothing)`` at most, for ``k`` kept; the mean is ``1 / k``);
    with 0, a sample whose score is tiny against the batch's is kept rarely and weighs a lot when it is. With
    ``sync="global"`` each rank draws from its own batch, with shares relative to that batch's scores.

    Args:
        smoothing: uniform share mixed in, in [0, 1]. Default 0.0 (proportional to the score).

    Raises:
        ValueError: for ``smoothing`` outside [0, 1].
    """

    name = "importance"
    fixed_count = True
    weighted = True

    def __init__(self, smoothing: float = 0.0) -> None:
        if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0 <= smoothing <= 1:
            raise ValueError(
                f"smoothing must be in [0, 1] (the uniform share mixed into the score-proportional one), got "
                f"{smoothing!r}: use e.g. 0.1 to bound the importance weights, or 0 for none"
            )
        self.smoothing = float(smoothing)

    def select(self, scores: torch.Tensor, keep: float, generator: torch.Generator) -> Selection:
        n = scores.shape[0]
        k = keep_count(keep, n)
        index, prob = gumbel_top_k(importance_log_weights(scores, self.smoothing), k, generator)
        return Selection(index, prob, k / n)

    def __repr__(self) -> str:
        return f"ImportanceSampling(smoothing={self.smoothing})"
