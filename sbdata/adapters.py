"""Hooks for common batch and model shapes, ready to pass to any front end as ``**adapter``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["causal_lm", "pad_right"]


def causal_lm(ignore_index: int = -100) -> dict[str, Callable[..., Any]]:
    """``split``, ``forward``, ``loss_fn`` and ``reduce`` for a causal language model on token batches.

    Batches are mappings with ``input_ids`` (B, T) and optionally ``attention_mask`` (B, T) and ``labels`` (B, T),
    as the Transformers collators build them. Targets are ``labels`` where given, else ``input_ids`` with padding
    (``attention_mask == 0``) set to ``ignore_index``. The loss of a sequence is the mean next-token cross-entropy
    over its real target tokens (position ``t`` predicts token ``t+1``; ``ignore_index`` targets count for nothing),
    computed in float32, so a sequence's score does not depend on how much padding its batch added. A sequence with
    no real target token scores 0. Use right padding: a causal model without position ids computed from the mask
    sees left padding as a shift of positions.

    Usage::

        sb = SBLoader(loader, model, keep=0.5, **causal_lm())

    Args:
        ignore_index: target value that marks tokens without a loss. Default -100 (what Transformers uses).

    Returns:
        ``{"loss_fn", "split", "forward", "reduce"}``, keyword arguments of every sbdata front end.
    """
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"ignore_index must be an int, got {ignore_index!r}")

    def split(batch: Any) -> tuple[dict[str, Any], torch.Tensor]:
        if not isinstance(batch, Mapping) or "input_ids" not in batch:
            keys = list(batch) if isinstance(batch, Mapping) else type(batch).__name__
            raise ValueError(
                f"causal_lm() expects mapping batches with 'input_ids' (and optionally 'attention_mask', 'labels'), "
                f"got {keys}: pass your own split= for other batch shapes"
            )
        inputs = {key: value for key, value in batch.items() if key != "labels"}
        labels = batch.get("labels")
        if labels is None:
            labels = batch["input_ids"]
            mask = batch.get("attention_mask")
            if mask is not None:
                labels = labels.masked_fill(mask == 0, ignore_index)
        return inputs, labels

    def forward(model: nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        outputs = model(**inputs)
        if hasattr(outputs, "logits"):
            return outputs.logits
        return outputs[0] if isinstance(outputs, (tuple, list)) else outputs

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "none") -> torch.Tensor:
        """Per-token next-token cross-entropy, (B, T-1), 0 where the target is ``ignore_index``."""
        shifted = logits[:, :-1].float()
        targets = labels[:, 1:].to(logits.device)
        losses = F.cross_entropy(shifted.transpose(1, 2), targets, ignore_index=ignore_index, reduction="none")
        if reduction == "none":
            return losses
        real = (targets != ignore_index).sum().clamp(min=1)
        return losses.sum() / real if reduction == "mean" else losses.sum()

    def reduce(losses: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean over each sequence's real target tokens, (B,)."""
        real = (labels[:, 1:].to(losses.device) != ignore_index).to(losses.dtype)
        return (losses * real).sum(1) / real.sum(1).clamp(min=1)

    return {"loss_fn": loss_fn, "split": split, "forward": forward, "reduce": reduce}


def pad_right(
    examples: Sequence[Mapping[str, Any]], pad_id: int = 0, ignore_index: int = -100
) -> dict[str, torch.Tensor]:
    """Collate token sequences into the right-padded batch :func:`causal_lm` expects (a ``collate_fn``).

    Each example is a mapping with ``input_ids`` (a 1-D integer tensor or list); other keys are ignored. The batch
    is ``input_ids`` (B, T) padded on the right with ``pad_id`` to the longest sequence, ``attention_mask`` (B, T)
    with 1 on real tokens, and ``labels`` (B, T): the ids, with padding set to ``ignore_index``.

    Args:
        examples: the sequences of one batch, at least one.
        pad_id: token id written into the padding. Default 0.
        ignore_index: label of padding positions. Default -100.

    Raises:
        ValueError: for an empty batch, or an example without ``input_ids`` or with ids that are not 1-D.
    """
    if not examples:
        raise ValueError("pad_right needs at least one example")
    rows = []
    for position, example in enumerate(examples):
        if not isinstance(example, Mapping) or "input_ids" not in example:
            raise ValueError(f"example {position} has no 'input_ids': pad_right collates {{'input_ids': ids}} mappings")
        ids = torch.as_tensor(example["input_ids"], dtype=torch.long)
        if ids.dim() != 1:
            raise ValueError(
                f"example {position}'s input_ids have shape {tuple(ids.shape)}, expected one sequence (T,)"
            )
        rows.append(ids)
    width = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(rows):
        input_ids[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": input_ids.masked_fill(mask == 0, ignore_index)}
