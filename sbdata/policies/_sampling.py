"""Sampling helpers for policies: rank weights, Gumbel-top-k draws without replacement, importance shares.

Each is a pure function on the scores' device with no host-device synchronisation; the built-in policies are made
of them, and a custom policy may be too.
"""

from __future__ import annotations

import math

import torch

__all__ = ["gumbel_top_k", "rank_log_weights"]


def rank_log_weights(scores: torch.Tensor, keep: float) -> torch.Tensor:
    """Log of Composer's unnormalised sampling weight for each sample.

    The sample of ascending rank ``r`` (0 = lowest score, ties by index) among ``N`` has weight
    ``((r + 0.5) / N) ** (1 / keep - 1)``, as in Composer's ``select_using_loss``.
    """
    n = scores.shape[0]
    order = torch.sort(scores, stable=True).indices
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(n, device=scores.device)
    return (1.0 / keep - 1.0) * torch.log((ranks.to(torch.float32) + 0.5) / n)


def gumbel_top_k(
    log_weight: torch.Tensor, k: int, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``k`` of ``N`` without replacement, with probability proportional to ``exp(log_weight)``.

    Gumbel-top-k: the k largest of ``log_weight + Gumbel noise`` are distributed as k successive draws without
    replacement (``np.random.choice(replace=False, p=...)``). Returns the indices in ascending order and, for
    each, its inclusion probability conditional on the (k+1)-th largest key (priority sampling, Kool et al.
    2019), so that ``sum(value[i] / prob[i])`` over the sample is an unbiased estimate of ``sum(value)``.
    """
    n = log_weight.shape[0]
    noise = torch.empty(n, device=log_weight.device, dtype=torch.float32).exponential_(generator=generator)
    keys = log_weight - torch.log(noise)  # log-weight plus standard Gumbel noise
    top = torch.topk(keys, min(k + 1, n))
    index = top.indices[:k]
    if k < n:
        prob = -torch.expm1(-torch.exp(log_weight[index] - top.values[k]))
    else:
        prob = torch.ones(k, device=log_weight.device)
    order = torch.sort(index)
    return order.values, prob[order.indices]


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
