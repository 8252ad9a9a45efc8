"""The policy contract: what a selection policy is handed, what it returns, and what it must declare.

Every policy maps per-sample scores (losses, or reducible losses) of shape (N,) on the scoring device to a
:class:`Selection`: the kept indices in ascending order, and for sampling policies the inclusion probability of
each kept sample, from which the engine derives importance weights. Random policies draw only from the
``torch.Generator`` they are given, on the scores' device; the global RNGs are never touched.

A third-party :class:`SelectionPolicy` depends on the names here and on the sampling helpers of
``sbdata.policies`` (``gumbel_top_k``, ``rank_log_weights``, ``importance_log_weights``), nothing private:
``bind`` gets a :class:`PolicyOptions` (to refuse a misuse at construction), ``adjust`` a :class:`ScoreContext` (to
turn losses into the scores it ranks, scoring another model if it must).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import nn

__all__ = ["PolicyOptions", "ScoreContext", "Selection", "SelectionPolicy", "keep_count"]


def keep_count(keep: float, n: int) -> int:
    """Samples kept from ``n`` candidates: ``ceil(keep * n)``, at least 1 (0 for an empty batch), at most ``n``.

    A tolerance of 1e-9 absorbs float error, so ``keep_count(0.3, 10) == 3``.
    """
    if n == 0:
        return 0
    return min(n, max(1, math.ceil(keep * n - 1e-9)))


@dataclass(frozen=True)
class PolicyOptions:
    """The engine's selection options, as :meth:`~sbdata.SelectionPolicy.bind` sees them (once, at construction).

    Attributes:
        keep: the share of each SB batch kept, in (0, 1] (with ``keep="auto"``, the controller's starting share; it
            moves within ``Auto``'s bounds while training).
        keep_given: whether the user passed ``keep`` (False: the default 0.5).
        return_weights: whether importance weights are yielded (the policy must then report probabilities).
        id_key: where batches keep per-sample ids, or None.
        device: the scoring device.
    """

    keep: float
    keep_given: bool
    return_weights: bool
    id_key: Any
    device: torch.device


@dataclass
class ScoreContext:
    """What a policy may use besides the losses (e.g. :class:`~sbdata.ReducibleSelect`): one SB batch as scored.

    Attributes:
        inputs, targets: the batch's split, on the scoring device.
        ids: the per-sample ids (``id_key``), or None.
        batch_size: the number of samples.
        device: the scoring device.
        score: ``score(model) -> (batch_size,)`` per-sample losses of another model on the same batch, through the
            same side-effect-free scoring pass.
    """

    inputs: Any
    targets: Any
    ids: Any
    batch_size: int
    device: torch.device
    score: Callable[[nn.Module], torch.Tensor]


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

    def fingerprint(self) -> str:
        """What a saved state of this policy depends on, as a short string (default: the class name).

        A loader refuses to load a state whose policy fingerprint differs, naming both. A policy whose state
        depends on a setting (a history size, a wrapped policy) includes it, e.g. ``"HistoryPercentile(history=1024)"``.
        """
        return type(self).__name__

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} is stateless but got state with keys {sorted(state)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
