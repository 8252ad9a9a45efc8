"""The built-in fixed-count policies: :class:`TopK`, :class:`RankWeighted` and :class:`RandomK`.

Each keeps ``keep_count(keep, N)`` samples, a number known on the host, so they run with no host-device
synchronisation.
"""

from __future__ import annotations

import torch

from sbdata.policies._base import Selection, SelectionPolicy, keep_count
from sbdata.policies._sampling import gumbel_top_k, rank_log_weights

__all__ = ["RandomK", "RankWeighted", "TopK"]


def _ascending(index: torch.Tensor) -> torch.Tensor:
    return torch.sort(index).values


class TopK(SelectionPolicy):
    """The ``keep_count(keep, N)`` highest scores; ties go to the lower index. Deterministic.

    No unbiased importance weight exists for a deterministic cut (samples below it have probability 0), so
    ``return_weights=True`` with this policy is an error.
    """

    name = "topk"
    fixed_count = True
    weighted = False

    def select(self, scores: torch.Tensor, keep: float, generator: torch.Generator) -> Selection:
        k = keep_count(keep, scores.shape[0])
        order = torch.sort(scores, descending=True, stable=True).indices
        return Selection(_ascending(order[:k]), None, k / scores.shape[0])


class RankWeighted(SelectionPolicy):
    """Composer's rank-weighted sampling without replacement, on the device.

    Draws ``keep_count(keep, N)`` samples with probability proportional to ``((rank + 0.5) / N) ** (1/keep - 1)``
    over ascending score rank: the distribution of Composer's ``select_using_loss``, drawn by Gumbel-top-k with the
    given generator instead of numpy. The inclusion probability reported for importance weights is the one
    conditional on the (k+1)-th largest perturbed key (priority sampling; Kool et al. 2019), whose
    Horvitz-Thompson sum is unbiased.

    With ``sync="global"`` the rank and N are those of the global batch (ties by rank, then position), and each
    rank still draws ``keep_count(keep, N_local)`` of its own samples with those weights.
    """

    name = "rank"
    fixed_count = True
    weighted = True

    @property
    def uses_population(self) -> bool:
        return True

    def select(self, scores: torch.Tensor, keep: float, generator: torch.Generator) -> Selection:
        return self._draw(rank_log_weights(scores, keep), keep, generator)

    def select_global(
        self, scores: torch.Tensor, keep: float, generator: torch.Generator, population: torch.Tensor, offset: int
    ) -> Selection:
        own = rank_log_weights(population, keep)[offset : offset + scores.shape[0]]
        return self._draw(own, keep, generator)

    def _draw(self, log_weight: torch.Tensor, keep: float, generator: torch.Generator) -> Selection:
        n = log_weight.shape[0]
        k = keep_count(keep, n)
        index, prob = gumbel_top_k(log_weight, k, generator)
        return Selection(index, prob, k / n)


class RandomK(SelectionPolicy):
    """A uniform random subset of ``keep_count(keep, N)`` samples: the control arm."""

    name = "random"
    fixed_count = True
    weighted = True

    def select(self, scores: torch.Tensor, keep: float, generator: torch.Generator) -> Selection:
        n = scores.shape[0]
        k = keep_count(keep, n)
        index = torch.randperm(n, generator=generator, device=scores.device)[:k]
        return Selection(_ascending(index), torch.full((k,), k / n, device=scores.device), k / n)
