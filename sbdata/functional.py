"""Composer-compatible functional API: migrate by changing the import."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from sbdata.engine import should_selective_backprop
from sbdata.policies import gumbel_top_k, rank_log_weights
from sbdata.scoring import Scorer, per_sample_loss_fn

__all__ = ["select_using_loss", "should_selective_backprop"]

_INTERPOLATABLE_DIMS = (3, 4, 5)


def select_using_loss(
    input: torch.Tensor,  # noqa: A002 - Composer's argument name, kept for drop-in compatibility
    target: torch.Tensor,
    model: Callable[[torch.Tensor], torch.Tensor],
    loss_fun: Callable[..., torch.Tensor],
    keep: float = 0.5,
    scale_factor: float = 1,
    *,
    generator: torch.Generator | None = None,
    score_mode: str = "batch",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep a loss-weighted random subset of a batch, as Composer's ``select_using_loss`` does.

    Draws ``int(keep * N)`` samples (at least 1, where Composer returns none) without replacement with
    probability proportional to ``((rank + 0.5) / N) ** (1/keep - 1)`` over ascending loss rank: Composer's
    distribution, drawn on the input's device by a ``torch.Generator`` (``generator``, or one seeded from numpy's
    global RNG, which Composer samples with). Differences from Composer, all deliberate:
    the kept samples come back in their original order; a batch of one keeps its sample; and an ``nn.Module``
    is scored as training normalises, without dropout, updating no running statistics (``score_mode``, as for
    :class:`~sbdata.SBLoader`), with its train/eval flags restored, so the scoring pass has no side effects.

    Args:
        input: batch of inputs, (N, ...).
        target: batch of targets, (N, ...).
        model: the model, or any callable from inputs to outputs.
        loss_fun: ``loss_fun(outputs, target, reduction='none')`` returning per-sample losses.
        keep: share of the batch to keep, in (0, 1]. Default 0.5.
        scale_factor: spatial downsampling of the scoring input, in (0, 1]; needs 3-5 dim inputs. Default 1.
        generator: ``torch.Generator`` on the input's device. None draws its seed from NumPy's global RNG, as
            Composer does: each call on a non-empty batch consumes exactly one
            ``np.random.randint(0, 2**63 - 1, dtype=np.int64)`` and nothing from torch's or Python's global
            RNGs, so a run after ``np.random.seed(s)`` (which Composer's
            ``seed_all``, Lightning's ``seed_everything`` and Transformers' ``set_seed`` call) repeats its
            selections; ``score_mode="train"`` dropout draws from a stream seeded with the same seed. With a
            generator no global RNG is touched. Default None.
        score_mode: ``"batch"``, ``"eval"`` or ``"train"``, for an ``nn.Module`` model (see
            :class:`~sbdata.EngineOptions`). Default ``"batch"``.

    Returns:
        The kept ``(input, target)``.

    Raises:
        ValueError: if ``scale_factor > 1``, ``keep`` is outside (0, 1], or ``scale_factor != 1`` with an input
            that is not 3, 4 or 5-dimensional.
        TypeError: if ``loss_fun`` is not callable or does not take ``reduction``.
    """
    if scale_factor != 1 and input.dim() not in _INTERPOLATABLE_DIMS:
        raise ValueError(f"Input must be 3D, 4D, or 5D if scale_factor != 1, got {input.dim()}")
    if scale_factor > 1:
        raise ValueError(f"scale_factor must be <= 1, got {scale_factor}")
    if not 0 < keep <= 1:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    per_sample_loss_fn(loss_fun)  # raises TypeError for a non-callable or a loss without reduction
    n = input.shape[0]
    if n == 0:
        return input, target
    module = model if isinstance(model, torch.nn.Module) else _CallableModule(model)
    scorer = Scorer(loss_fun, score_mode=score_mode, scale_factor=scale_factor)
    seed = None
    if generator is None:
        seed = _global_numpy_seed()
        generator = torch.Generator(device=input.device)
        generator.manual_seed(seed)
    losses = scorer(module, input, target, n, input.device, seed)  # train-mode dropout: the same seeded stream
    count = max(1, int(keep * n))
    index, _ = gumbel_top_k(rank_log_weights(losses, keep), count, generator)
    return input[index], target[index.to(target.device)]


_SEED_BOUND = np.iinfo(np.int64).max  # seeds in [0, 2**63 - 1)


def _global_numpy_seed() -> int:
    """One draw from NumPy's global RNG (``np.random.randint(0, 2**63 - 1, dtype=np.int64)``): the seed of a call
    without a generator, so that ``np.random.seed(s)`` repeats a run, as it repeats Composer's ``np.random.choice``."""
    return int(np.random.randint(0, _SEED_BOUND, dtype=np.int64))


class _CallableModule(torch.nn.Module):
    """Lets a plain callable go through the scoring pass (it has no modes or buffers to restore)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Any) -> Any:
        return self.fn(x)
