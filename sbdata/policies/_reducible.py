"""Reducible-loss selection (RHO-LOSS, Mindermann et al. 2022)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from sbdata.policies._base import PolicyOptions, ScoreContext, Selection, SelectionPolicy
from sbdata.policies._registry import resolve_policy

__all__ = ["ReducibleSelect"]


class ReducibleSelect(SelectionPolicy):
    """Rank samples by training loss minus an irreducible loss, then select with a base policy.

    A sample whose loss is high only because it is noisy or ambiguous has an equally high irreducible loss, so
    its reducible loss is low and it is not preferred; a sample the model has yet to learn keeps a high one.

    Args:
        irreducible: one of
            - an ``nn.Module`` trained on held-out data: scored on each SB batch in the same no-grad pass, on the
              same device, with the same loss, mode handling and ``scale_factor`` as the live model;
            - a mapping from sample id to precomputed irreducible loss (ids read with the engine's ``id_key``,
              e.g. WebDataset's ``__key__``);
            - a 1-D tensor of precomputed losses indexed by integer sample ids (``id_key`` on an index field).
        policy: the base policy applied to the reducible losses, a name or a :class:`SelectionPolicy`.
            Default ``"topk"``.
    """

    name = "reducible"

    def __init__(self, irreducible: nn.Module | Mapping[Any, float] | torch.Tensor, policy: Any = "topk") -> None:
        if isinstance(irreducible, torch.Tensor) and irreducible.dim() != 1:
            raise ValueError(
                f"an irreducible-loss tensor must be 1-D (one loss per id), got {tuple(irreducible.shape)}"
            )
        if not isinstance(irreducible, (nn.Module, Mapping, torch.Tensor)):
            raise TypeError(
                "irreducible must be an nn.Module, a mapping id -> loss or a 1-D tensor indexed by id, "
                f"got {type(irreducible).__name__}"
            )
        self.irreducible = irreducible
        self.base = resolve_policy(policy)
        if isinstance(self.base, ReducibleSelect):
            raise ValueError("ReducibleSelect cannot wrap another ReducibleSelect: subtract both losses in one table")

    @property
    def fixed_count(self) -> bool:
        return self.base.fixed_count

    @property
    def weighted(self) -> bool:
        return self.base.weighted

    @property
    def uses_population(self) -> bool:
        return self.base.uses_population

    def bind(self, options: PolicyOptions) -> None:
        if isinstance(self.irreducible, nn.Module):
            for tensor in (*self.irreducible.parameters(), *self.irreducible.buffers()):
                if tensor.device != options.device:
                    raise ValueError(
                        f"the irreducible model is on {tensor.device} but scoring runs on {options.device}: "
                        "move it with .to(device)"
                    )
                break
        elif options.id_key is None:
            raise ValueError(
                "ReducibleSelect with a table of precomputed losses needs id_key= naming the batch field that holds "
                "each sample's id (e.g. id_key='__key__' or id_key='index')"
            )
        self.base.bind(options)

    def irreducible_losses(self, context: ScoreContext) -> torch.Tensor:
        """Irreducible loss of each sample in the scored batch, (N,) float32 on the scoring device."""
        if isinstance(self.irreducible, nn.Module):
            return context.score(self.irreducible)
        ids = context.ids
        if isinstance(self.irreducible, torch.Tensor):
            table = self.irreducible.to(context.device, torch.float32)
            index = torch.as_tensor(ids, device=context.device).long()
            missing = (index < 0) | (index >= table.shape[0])
            if bool(missing.any()):
                raise ValueError(
                    f"no irreducible loss for ids {index[missing].tolist()[:20]}: the table holds ids 0.."
                    f"{table.shape[0] - 1}"
                )
            return table.index_select(0, index)
        keys = ids.tolist() if isinstance(ids, (torch.Tensor, np.ndarray)) else list(ids)
        values = []
        for key in keys:
            if key not in self.irreducible:
                raise ValueError(f"no irreducible loss for id {key!r}: add it to the table or drop the sample")
            values.append(float(self.irreducible[key]))
        return torch.tensor(values, dtype=torch.float32, device=context.device)

    def adjust(self, losses: torch.Tensor, context: ScoreContext) -> torch.Tensor:
        return losses - self.irreducible_losses(context)

    def select(self, scores: torch.Tensor, keep: float, generator: torch.Generator) -> Selection:
        return self.base.select(scores, keep, generator)

    def select_global(
        self, scores: torch.Tensor, keep: float, generator: torch.Generator, population: torch.Tensor, offset: int
    ) -> Selection:
        return self.base.select_global(scores, keep, generator, population, offset)

    def fingerprint(self) -> str:
        """The class and the wrapped policy's fingerprint (its state is the wrapped policy's)."""
        return f"{type(self).__name__}({self.base.fingerprint()})"

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base.load_state_dict(state)

    def __repr__(self) -> str:
        return f"ReducibleSelect({type(self.irreducible).__name__}, policy={self.base!r})"
