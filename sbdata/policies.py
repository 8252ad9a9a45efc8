"""Selection policies: which samples of a scored batch to keep.

Every policy maps per-sample scores (losses, or reducible losses) of shape (N,) on the scoring device to a
:class:`Selection`: the kept indices in ascending order, and for sampling policies the inclusion probability of
each kept sample, from which the engine derives importance weights. Random policies draw only from the
``torch.Generator`` they are given, on the scores' device; the global RNGs are never touched.

The fixed-count policies (:class:`TopK`, :class:`RankWeighted`, :class:`RandomK`) keep ``keep_count(keep, N)``
samples, a number known on the host, so they run with no host-device synchronisation.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from .policy_types import PolicyOptions, ScoreContext

__all__ = [
    "RandomK",
    "RankWeighted",
    "Selection",
    "SelectionPolicy",
    "TopK",
    "gumbel_top_k",
    "keep_count",
    "rank_log_weights",
]


def keep_count(keep: float, n: int) -> int:
    """Samples kept from ``n`` candidates: ``ceil(keep * n)``, at least 1 (0 for an empty batch), at most ``n``.

    A tolerance of 1e-9 absorbs float error, so ``keep_count(0.3, 10) == 3``.
    """
    if n == 0:
        return 0
    return min(n, max(1, math.ceil(keep * n - 1e-9)))


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


class Selection(NamedTuple):
    """What a policy kept from one batch of N candidates.

    Attributes:
        index: (k,) int64 kept positions, ascending, on the scores' device.
        prob: (k,) float inclusion probability of each kept sample, or None for deterministic policies.
        expected: expected kept fraction of this batch, a float or a 0-dim tensor.
    """

    index: torch.Tensor  # type: ignore[assignment]  # shadows tuple.index: the field's name is the API
    prob: torch.Tensor | None
    expected: float | torch.Tensor


_CONTRACT = {
    "fixed_count": "True only if select() always keeps exactly keep_count(keep, N) samples; the lockstep under "
    "torch.distributed, the pooled path's and len()'s arithmetic rely on it",
    "weighted": "True only if select() returns each kept sample's inclusion probability in Selection.prob, from "
    "which return_weights=True derives unbiased importance weights",
}


class SelectionPolicy:
    """Interface of a selection policy.

    Subclasses implement :meth:`select` and must declare two booleans, as class attributes or properties (a
    subclass that declares neither is refused when it is defined, since a wrong default would break the
    lockstep of ranks under ``torch.distributed`` or the importance weights):

    - ``fixed_count``: True only if :meth:`select` always keeps exactly ``keep_count(keep, N)`` samples;
    - ``weighted``: True only if :meth:`select` returns each kept sample's inclusion probability in
      ``Selection.prob`` (needed by ``return_weights=True``).

    Stateful ones also implement :meth:`state_dict`/:meth:`load_state_dict`. A policy object holds per-run
    state: give each loader its own.
    """

    name: str = "policy"

    if TYPE_CHECKING:  # declared by every subclass, as a class attribute or a property

        @property
        def fixed_count(self) -> bool: ...

        @property
        def weighted(self) -> bool: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [attribute for attribute in _CONTRACT if not hasattr(cls, attribute)]
        if missing:
            meanings = "; ".join(f"{attribute}: {_CONTRACT[attribute]}" for attribute in missing)
            raise TypeError(
                f"{cls.__name__} must declare {' and '.join(missing)} (class attributes or properties, e.g. "
                f"fixed_count = False, weighted = False): {meanings}"
            )

    @property
    def uses_population(self) -> bool:
        """True when :meth:`select_global` uses the other ranks' scores (so ``sync="global"`` gathers them)."""
        return False

    def bind(self, options: PolicyOptions) -> None:
        """Check the selection options once, at construction; raise ValueError on a misuse."""

    def adjust(self, losses: torch.Tensor, context: ScoreContext) -> torch.Tensor:
        """Turn per-sample losses into the scores the policy ranks (identity here); ``context`` is the scored batch
        (inputs, targets, ids, and ``score(model)`` to score it with another model)."""
        return losses

    def select(self, scores: torch.Tensor, keep: float, generator: torch.Generator) -> Selection:
        """Choose samples from ``scores`` (N,), N >= 1.

        Under ``nan_policy="drop"`` every score is finite, under ``"keep"`` finite or +inf. Under the default
        ``"raise"`` the check is deferred so that it needs no synchronisation: its flag is read once it reaches the
        host (a group of 8 SB steps at a time; on the CPU when the group is full, on CUDA normally by the next one,
        at the latest at the epoch's end or in ``state_dict``). A batch with a NaN or infinite score therefore
        still reaches ``select``, and the ValueError naming it comes a few SB steps later: ``select`` must not
        fail, nor synchronise, on such scores.
        """
        raise NotImplementedError

    def select_global(
        self, scores: torch.Tensor, keep: float, generator: torch.Generator, population: torch.Tensor, offset: int
    ) -> Selection:
        """Choose from this rank's ``scores`` knowing every rank's (``sync="global"``; see ``docs/distributed.md``).

        Args:
            scores: this rank's (N,) candidate scores.
            keep: the engine's keep share.
            generator: the engine's generator.
            population: every rank's candidate scores in rank order, (N_global,); it contains ``scores`` at
                ``population[offset : offset + N]``.
            offset: where this rank's scores begin in ``population``.

        The default ignores the population: for a policy that keeps ``keep_count(keep, N)`` of a rank's own
        samples by their order alone (:class:`TopK`) or at random (:class:`RandomK`), the global batch changes
        nothing.
        """
        return self.select(scores, keep, generator)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} is stateless but got state with keys {sorted(state)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


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
