"""Hooks for common batch and model shapes, ready to pass to any front end as ``**hooks``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["causal_lm", "logits_of", "pad_right", "sequence_classification", "token_classification"]


def _check_ignore_index(ignore_index: Any) -> None:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"ignore_index must be an int, got {ignore_index!r}")


def _refuse(task: str, batch: Any) -> ValueError:
    keys = list(batch) if isinstance(batch, Mapping) else type(batch).__name__
    return ValueError(
        f"{task}() expects mapping batches with 'input_ids' (and optionally 'attention_mask', 'labels'), got "
        f"{keys}: pass your own split= for other batch shapes"
    )


def logits_of(model: nn.Module, inputs: Mapping[str, Any]) -> torch.Tensor:
    """``model(**inputs)``'s logits: ``.logits`` of a ``ModelOutput``, the first item of a tuple, or the output."""
    outputs = model(**inputs)
    if hasattr(outputs, "logits"):
        return outputs.logits
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs


def _token_hooks(task: str, ignore_index: int, shift: int) -> dict[str, Callable[..., Any]]:
    """The hooks of a per-token loss: position ``t`` of the logits scores target ``t + shift``."""

    def split(batch: Any) -> tuple[dict[str, Any], torch.Tensor]:
        if not isinstance(batch, Mapping) or "input_ids" not in batch:
            raise _refuse(task, batch)
        inputs = {key: value for key, value in batch.items() if key != "labels"}
        labels = batch.get("labels")
        if labels is None:
            if shift == 0:
                raise ValueError(f"{task}() needs 'labels' (B, T) in the batch, got {list(batch)}")
            labels = batch["input_ids"]
            mask = batch.get("attention_mask")
            if mask is not None:
                labels = labels.masked_fill(mask == 0, ignore_index)
        return inputs, labels

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "none") -> torch.Tensor:
        """Per-token cross-entropy, (B, T - shift), 0 where the target is ``ignore_index``."""
        if logits.dim() != 3 or labels.dim() != 2:
            other = "sequence_classification()" if labels.dim() == 1 else "your own loss_fn="
            raise ValueError(
                f"{task}() scores (B, T, V) logits against (B, T) labels, got logits {tuple(logits.shape)} and "
                f"labels {tuple(labels.shape)}: for this model use sbdata.tasks.{other}"
            )
        scored = logits[:, : logits.shape[1] - shift].float()
        targets = labels[:, shift:].to(logits.device)
        losses = F.cross_entropy(scored.transpose(1, 2), targets, ignore_index=ignore_index, reduction="none")
        if reduction == "none":
            return losses
        real = (targets != ignore_index).sum().clamp(min=1)
        return losses.sum() / real if reduction == "mean" else losses.sum()

    def reduce(losses: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean over each sequence's real target tokens, (B,)."""
        real = (labels[:, shift:].to(losses.device) != ignore_index).to(losses.dtype)
        return (losses * real).sum(1) / real.sum(1).clamp(min=1)

    return {"loss_fn": loss_fn, "split": split, "forward": logits_of, "reduce": reduce}


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
    _check_ignore_index(ignore_index)
    return _token_hooks("causal_lm", ignore_index, shift=1)


def token_classification(ignore_index: int = -100) -> dict[str, Callable[..., Any]]:
    """The hooks for a token classifier (``*ForTokenClassification``): logits (B, T, C), ``labels`` (B, T).

    A sequence's loss is the mean cross-entropy over its labelled tokens (no shift; ``ignore_index`` labels, such as
    padding and a word's later sub-tokens, count for nothing), in float32. A sequence with no label scores 0.

    Args:
        ignore_index: label that marks tokens without a loss. Default -100.

    Returns:
        ``{"loss_fn", "split", "forward", "reduce"}``; batches need ``input_ids`` and ``labels``.
    """
    _check_ignore_index(ignore_index)
    return _token_hooks("token_classification", ignore_index, shift=0)


_PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


def sequence_classification(problem_type: str | None = None) -> dict[str, Callable[..., Any]]:
    """The hooks for a sequence classifier (``*ForSequenceClassification``): logits (B, C), ``labels`` (B,) or,
    for several labels per sequence, (B, C).

    Each sequence's loss is the one the Transformers model trains on, per sample, in float32: mean squared error
    for regression, cross-entropy for single-label classification, binary cross-entropy with logits (mean over the
    labels) for multi-label classification. ``problem_type`` None decides per batch as the models do: regression
    for one logit, single-label for integer labels, else multi-label.

    Args:
        problem_type: ``model.config.problem_type``: None, ``"regression"``, ``"single_label_classification"`` or
            ``"multi_label_classification"``. Default None.

    Returns:
        ``{"loss_fn", "split", "forward"}``; batches need ``input_ids`` and ``labels``.
    """
    if problem_type is not None and problem_type not in _PROBLEM_TYPES:
        raise ValueError(f"problem_type must be None or one of {list(_PROBLEM_TYPES)}, got {problem_type!r}")

    def split(batch: Any) -> tuple[dict[str, Any], torch.Tensor]:
        if not isinstance(batch, Mapping) or "input_ids" not in batch:
            raise _refuse("sequence_classification", batch)
        if "labels" not in batch:
            raise ValueError(f"sequence_classification() needs 'labels' in the batch, got {list(batch)}")
        return {key: value for key, value in batch.items() if key != "labels"}, batch["labels"]

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "none") -> torch.Tensor:
        """Per-sequence loss, (B,)."""
        if logits.dim() != 2:
            raise ValueError(
                f"sequence_classification() scores (B, C) logits, got {tuple(logits.shape)}: for per-token logits "
                "use sbdata.tasks.causal_lm() or token_classification()"
            )
        batch, classes = logits.shape
        labels = labels.to(logits.device)
        kind = problem_type
        if kind is None:
            integer = labels.dtype in (torch.long, torch.int)  # as the models decide
            kind = _PROBLEM_TYPES[0 if classes == 1 else 1 if integer else 2]
        if kind == "regression":
            losses = (logits.float().reshape(batch, -1) - labels.float().reshape(batch, -1)).square().mean(1)
        elif kind == "single_label_classification":
            losses = F.cross_entropy(logits.float(), labels.reshape(batch).long(), reduction="none")
        else:
            losses = F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="none").mean(1)
        return losses if reduction == "none" else losses.mean() if reduction == "mean" else losses.sum()

    return {"loss_fn": loss_fn, "split": split, "forward": logits_of}


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
