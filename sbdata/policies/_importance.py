"""Importance sampling: keep samples with probability proportional to their score (Katharopoulos & Fleuret 2018).

"Not All Samples Are Created Equal" samples a batch with probability proportional to an upper bound of each
sample's gradient norm and reweights it so that the gradient stays unbiased. :class:`ImportanceDraw` draws
``keep_count(keep, N)`` of ``N`` scored candidates without replacement, with probability proportional to the score
(the loss, or with ``score="gradnorm"`` the norm of the loss's gradient with respect to the model's outputs, the
paper's bound up to the last layer's Lipschitz constant), mixed with a uniform share ``smoothing``. It draws by
Gumbel-top-k on the device, so the kept count is known on the host and nothing synchronises; the inclusion
probability it reports is the priority-sampling one (conditional on the (k+1)-th perturbed key; Kool et al. 2019),
whose Horvitz-Thompson weights ``return_weights=True`` turns into an unbiased estimate of the candidates' mean loss
(and so of the full-batch gradient).
"""

from __future__ import annotations

import torch

from sbdata.policies._base import Selection, SelectionPolicy, keep_count
from sbdata.policies._sampling import gumbel_top_k, importance_log_weights

__all__ = ["ImportanceDraw"]


class ImportanceDraw(SelectionPolicy):
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
        return f"ImportanceDraw(smoothing={self.smoothing})"
