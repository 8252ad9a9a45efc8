"""One batch scored two ways, and how far the two agree: the piece behind sbdata's self-checks.

Two scoring settings (low-precision autocast against full precision), or the scoring pass against the training
losses a user observed (eval-mode BatchNorm statistics against the batch's own), give two per-sample score vectors
of one batch. :func:`compare` is the pure maths on two vectors: the share of the samples top-k would keep under the
first that it also keeps under the second, ``|A ∩ B| / k``, and the ratio of their means. Everything stays on the
device: nothing is read on the host unless the caller reads it (e.g. through :class:`~sbdata.batch.HostCopy`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from sbdata.policies import keep_count

__all__ = ["MODE_RATIO_LIMIT", "compare", "has_running_stats"]

_TINY = 1e-12  # the smallest denominator of a ratio (a loss of exactly 0)
MODE_RATIO_LIMIT = 3.0
"""Above this ratio of the mean eval-mode scoring loss to the mean train-mode (training) loss of the same samples,
sbdata says that the running statistics are far off and names ``score_mode="batch"`` (three times the model's own
loss: far beyond the few per cent an optimizer step or dropout moves it; with far-off statistics the logits grow
large, and the mean, unlike a median, counts the samples they make confidently wrong)."""


def has_running_stats(model: nn.Module) -> bool:
    """Whether any module of ``model`` normalises with running statistics in eval mode (BatchNorm and its kin: a
    ``running_mean`` buffer and ``track_running_stats``), so that eval-mode and train-mode scores can differ far."""
    return any(
        getattr(module, "track_running_stats", False)
        and isinstance(getattr(module, "running_mean", None), torch.Tensor)
        for module in model.modules()
    )


class TwoWays(NamedTuple):
    """One batch's scores two ways, and their agreement.

    Attributes:
        first: the (N,) scores under the first setting, float32 or float64, on the device.
        second: the (N,) scores under the second setting.
        agreement: 0-dim float32 tensor: ``|A ∩ B| / k``, where A and B are the ``k = keep_count(keep, N)``
            samples with the highest first and second scores (1.0: top-k keeps the same samples either way; for
            an empty batch, 1.0). Non-finite scores rank as the highest, as ``nan_policy="keep"`` ranks them.
        ratio: 0-dim float32 tensor: ``mean(first) / mean(second)`` over the samples finite in both (a denominator
            below 1e-12 raised to it; NaN for an empty batch or none finite).
    """

    first: torch.Tensor
    second: torch.Tensor
    agreement: torch.Tensor
    ratio: torch.Tensor


def compare(first: torch.Tensor, second: torch.Tensor, keep: float) -> TwoWays:
    """Compare two (N,) score vectors of the same samples (pure; device ops only, no synchronisation).

    Args:
        first: the scores under the first setting.
        second: the scores under the second setting (same shape).
        keep: the share top-k keeps, in (0, 1].

    Raises:
        ValueError: for vectors of different shapes or not 1-dimensional, or ``keep`` outside (0, 1].
    """
    if first.dim() != 1 or first.shape != second.shape:
        raise ValueError(
            f"compare needs two (N,) score vectors of the same samples, got {tuple(first.shape)} and "
            f"{tuple(second.shape)}"
        )
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 < keep <= 1:
        raise ValueError(f"keep must be a share in (0, 1], got {keep!r}")
    n = first.shape[0]
    device = first.device
    if n == 0:
        one = torch.ones((), dtype=torch.float32, device=device)
        return TwoWays(first, second, one, torch.full((), float("nan"), device=device))
    k = keep_count(keep, n)
    a = _ranked(first).topk(k).indices
    b = _ranked(second.to(device)).topk(k).indices
    chosen = torch.zeros(n, dtype=torch.bool, device=device)
    chosen[a] = True
    agreement = chosen[b].sum(dtype=torch.float32) / k
    a64, b64 = first.double(), second.to(device).double()
    finite = torch.isfinite(a64) & torch.isfinite(b64)
    count = finite.sum(dtype=torch.float64)
    mean_a = torch.where(finite, a64, 0.0).sum() / count
    mean_b = torch.where(finite, b64, 0.0).sum() / count
    ratio = mean_a / mean_b.clamp(min=_TINY)  # 0 / 0 (none finite): NaN
    return TwoWays(first, second, agreement, ratio.to(torch.float32))


def _ranked(scores: torch.Tensor) -> torch.Tensor:
    """The scores as top-k ranks them: float, non-finite ones as the highest."""
    scores = scores if scores.is_floating_point() else scores.double()
    return torch.nan_to_num(scores, nan=torch.inf, neginf=torch.inf)
