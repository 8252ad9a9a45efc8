"""Epoch-level pruning rules: pure functions from the last known losses to each sample's weight for one epoch.

A rule has the signature ``rule(losses, known, prune, generator) -> weights``:

- ``losses``: ``(N,)`` float32, each sample's last known loss (meaningless where ``known`` is False).
- ``known``: ``(N,)`` bool, whether a finite loss is known for the sample.
- ``prune``: the pruning share ``r`` in ``[0, 1)``.
- ``generator``: a CPU ``torch.Generator``, the only source of randomness.
- returns ``(N,)`` float32 weights: 0 for a pruned sample, otherwise the factor its loss is multiplied by.

Samples without a known loss are always kept with weight 1. Rules are vectorised (a few ms for a million samples).
"""

from __future__ import annotations

import math

import torch

__all__ = ["below_percentile", "infobatch", "random_like_infobatch", "top_losses"]


def _prune_among(candidates: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """A uniform random subset of ``count`` of the ``candidates`` (a 1-D index tensor)."""
    order = torch.randperm(len(candidates), generator=generator)
    return candidates[order[:count]]


def _prune_low(low: torch.Tensor, prune: float, generator: torch.Generator) -> torch.Tensor:
    """Weights: prune ``floor(prune * |low|)`` of the ``low`` samples uniformly, rescale the rest by 1/(1-prune)."""
    weights = torch.ones(low.shape[0], dtype=torch.float32)
    candidates = torch.nonzero(low).squeeze(1)
    count = math.floor(prune * len(candidates))
    if count == 0:
        return weights
    weights[candidates] = 1.0 / (1.0 - prune)
    weights[_prune_among(candidates, count, generator)] = 0.0
    return weights


def infobatch(losses: torch.Tensor, known: torch.Tensor, prune: float, generator: torch.Generator) -> torch.Tensor:
    """InfoBatch (Qin et al., ICLR 2024): among the samples whose last loss is below the mean of the known losses,
    prune ``floor(prune * count)`` uniformly at random, and weigh the low-loss samples that stay by
    ``1 / (1 - prune)`` so the expected gradient is unchanged. Samples with no known loss are kept at weight 1."""
    if not bool(known.any()):
        return torch.ones(losses.shape[0], dtype=torch.float32)
    threshold = losses[known].mean()
    return _prune_low(known & (losses < threshold), prune, generator)


def below_percentile(
    losses: torch.Tensor, known: torch.Tensor, prune: float, generator: torch.Generator, *, percentile: float = 50.0
) -> torch.Tensor:
    """Like :func:`infobatch`, with the threshold at the ``percentile`` (0-100) of the known losses instead of
    their mean (use ``functools.partial(below_percentile, percentile=30.0)`` as a sampler's policy)."""
    if not 0.0 <= percentile <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {percentile!r}")
    if not bool(known.any()):
        return torch.ones(losses.shape[0], dtype=torch.float32)
    threshold = torch.quantile(losses[known].double(), percentile / 100.0).float()
    return _prune_low(known & (losses < threshold), prune, generator)


def random_like_infobatch(
    losses: torch.Tensor, known: torch.Tensor, prune: float, generator: torch.Generator
) -> torch.Tensor:
    """The control for :func:`infobatch`: prune as many samples as it would, chosen uniformly at random among the
    samples with a known loss, and keep every other sample at weight 1 (uniform pruning leaves the mean unbiased)."""
    weights = torch.ones(losses.shape[0], dtype=torch.float32)
    if not bool(known.any()):
        return weights
    count = math.floor(prune * int((known & (losses < losses[known].mean())).sum()))
    weights[_prune_among(torch.nonzero(known).squeeze(1), count, generator)] = 0.0
    return weights


def top_losses(
    losses: torch.Tensor,
    known: torch.Tensor,
    prune: float,
    generator: torch.Generator,
    *,
    keep: float = 0.25,
    recheck: float = 0.1,
) -> torch.Tensor:
    """Top-k at the sampler, scored for free by the training step's own losses: keep the ``ceil(keep * K)`` samples
    with the highest last known losses (of the ``K`` with a known loss; ties to the lower index), plus a re-check
    share of the rest, ``floor(recheck * rest)`` of them uniformly at random, so that a sample whose loss was low
    when last seen is seen again and its loss refreshed. Kept, re-checked and unknown samples weigh 1; the others 0
    (the mean is not reweighted: like fresh top-k, this trains on the hard samples, not on an unbiased estimate).

    ``prune`` is not read: ``keep`` and ``recheck`` set the shares (the sampler's ``prune=0`` still turns pruning
    off). Bind them with ``functools.partial(top_losses, keep=0.25, recheck=0.1)`` as a sampler's ``rule``;
    ``rule="top_losses"`` is this rule with its defaults.

    Args:
        keep: share of the known samples kept by highest loss, in (0, 1]. Default 0.25.
        recheck: share of the other known samples kept at random, in [0, 1]. Default 0.1.

    Raises:
        ValueError: for ``keep`` or ``recheck`` out of range.
    """
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0.0 < keep <= 1.0:
        raise ValueError(f"top_losses: keep must be in (0, 1] (the share kept by highest loss), got {keep!r}")
    if isinstance(recheck, bool) or not isinstance(recheck, (int, float)) or not 0.0 <= recheck <= 1.0:
        raise ValueError(
            f"top_losses: recheck must be in [0, 1] (the share of the rest kept at random), got {recheck!r}"
        )
    weights = torch.ones(losses.shape[0], dtype=torch.float32)
    candidates = torch.nonzero(known).squeeze(1)
    if len(candidates) == 0:
        return weights
    order = torch.sort(losses[candidates], descending=True, stable=True).indices
    rest = candidates[order[math.ceil(keep * len(candidates) - 1e-9) :]]
    weights[rest] = 0.0
    weights[_prune_among(rest, math.floor(recheck * len(rest) + 1e-9), generator)] = 1.0
    return weights
