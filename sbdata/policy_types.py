"""What a selection policy is handed: its options, once at construction, and the scored batch, on each SB step.

A third-party :class:`~sbdata.SelectionPolicy` depends on these two types and on nothing private: ``bind`` gets a
:class:`PolicyOptions` (to refuse a misuse at construction), ``adjust`` a :class:`ScoreContext` (to turn losses into
the scores it ranks, scoring another model if it must).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["PolicyOptions", "ScoreContext"]


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
    """What a policy may use besides the losses (e.g. :class:`~sbdata.ReducibleLoss`): one SB batch as scored.

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
