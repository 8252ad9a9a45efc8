"""``score="gradnorm"``: the per-sample norm of the loss's gradient with respect to the model's outputs.

Katharopoulos & Fleuret (2018) bound a sample's full gradient norm by this norm times a constant of the network, so
it is their importance-sampling score. Computed from the scoring forward's outputs alone: one
``torch.autograd.grad`` of the summed per-sample losses with respect to a detached copy of the outputs, so no weight
gradient is formed and no parameter's ``.grad`` is touched. For cross-entropy on ``(B, C)`` logits with class-index
targets the closed form ``||softmax(z) - onehot(y)||_2`` replaces the autograd pass (see
:func:`closed_form_ignore_index` for when it is taken).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SCORES"]

SCORES = ("loss", "gradnorm")
"""What the scoring pass measures per sample: the loss, or the norm of its gradient with respect to the outputs."""

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def closed_form_ignore_index(loss_fn: Any) -> int | None:
    """The ``ignore_index`` of a loss whose per-sample gradient norm has the cross-entropy closed form, else None.

    Only exactly plain cross-entropy qualifies: ``F.cross_entropy`` itself (the scorer calls it with its defaults:
    no class weights, no label smoothing, ``ignore_index=-100``), or an ``nn.CrossEntropyLoss`` (not a subclass)
    with ``weight=None`` and ``label_smoothing=0``. Anything else (a wrapper, a partial, a lambda, a subclass) takes
    the autograd path, which is right for every loss.
    """
    if loss_fn is F.cross_entropy:
        return -100
    if type(loss_fn) is nn.CrossEntropyLoss and loss_fn.weight is None and loss_fn.label_smoothing == 0:
        return int(loss_fn.ignore_index)
    return None


def cross_entropy_gradnorm(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """``||softmax(z_b) - onehot(y_b)||_2`` per row: the norm of ``d CE(z_b, y_b) / d z_b``, 0 where ``y_b`` is
    ``ignore_index`` (that sample's loss is 0). ``logits`` (B, C) float, ``targets`` (B,) integer class indices;
    returns (B,) float32 (float64 for float64 logits), with no synchronisation."""
    if logits.dtype in _LOW_PRECISION:
        logits = logits.to(torch.float32)
    valid = targets != ignore_index
    index = torch.where(valid, targets, 0).unsqueeze(1)
    residual = torch.softmax(logits, dim=1).scatter_add(1, index, -valid.to(logits.dtype).unsqueeze(1))
    return torch.linalg.vector_norm(residual, dim=1) * valid


def autograd_gradnorm(
    outputs: Any,
    targets: Any,
    per_sample: Callable[[Any, Any], torch.Tensor],
) -> torch.Tensor:
    """Per-sample ``||d loss_b / d outputs_b||_2`` for any loss, by one ``torch.autograd.grad``.

    Args:
        outputs: the scoring forward's outputs, a floating tensor whose first dimension is the batch (half
            precision is upcast to float32 first).
        targets: the batch's targets.
        per_sample: ``per_sample(outputs, targets) -> (B,)`` losses (the loss and its reduction over extra
            dimensions), differentiable in ``outputs``; each sample's loss must depend on its own row only, as a
            loss computed with ``reduction='none'`` does.

    Returns:
        (B,) norms over all non-batch dimensions, detached.

    Raises:
        TypeError: if ``outputs`` is not a floating tensor (with the fix).
    """
    if not isinstance(outputs, torch.Tensor) or not outputs.is_floating_point():
        what = f"a {outputs.dtype} tensor" if isinstance(outputs, torch.Tensor) else f"a {type(outputs).__name__}"
        raise TypeError(
            f"score='gradnorm' differentiates the loss with respect to the model's outputs, but they are {what}: "
            "pass forward=lambda m, x: m(x)[0] (or m(x).logits) so that the loss gets floating logits, or "
            "score='loss'"
        )
    leaf = outputs.detach()
    if leaf.dtype in _LOW_PRECISION:
        leaf = leaf.to(torch.float32)
    with torch.enable_grad():
        leaf.requires_grad_(True)
        losses = per_sample(leaf, targets)
        grad = torch.autograd.grad(losses.sum(), leaf, allow_unused=True)[0] if losses.requires_grad else None
    if grad is None:  # the loss does not depend on the outputs
        return torch.zeros(leaf.shape[0], dtype=leaf.dtype, device=leaf.device)
    return torch.linalg.vector_norm(grad.reshape(grad.shape[0], -1), dim=1)


def gradnorm(
    outputs: Any, targets: Any, ignore_index: int | None, per_sample: Callable[[Any, Any], torch.Tensor]
) -> torch.Tensor:
    """Per-sample gradient norms: the closed form where ``ignore_index`` is not None (a plain cross-entropy, see
    :func:`closed_form_ignore_index`) and the batch is (B, C) floating logits with (B,) integer targets (host-side
    checks only), else :func:`autograd_gradnorm` with ``per_sample``."""
    if (
        ignore_index is not None
        and isinstance(outputs, torch.Tensor)
        and outputs.dim() == 2
        and outputs.is_floating_point()
        and isinstance(targets, torch.Tensor)
        and targets.shape == (outputs.shape[0],)
        and not targets.is_floating_point()
    ):
        return cross_entropy_gradnorm(outputs, targets, ignore_index)
    return autograd_gradnorm(outputs, targets, per_sample)
