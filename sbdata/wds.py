"""sb_select: the selection engine as a WebDataset pipeline stage.

A curried generator over batches, composed after the loader's workers so that it scores in the training
process::

    stage = sb_select(model, F.cross_entropy, keep=0.5)
    loader = wds.WebLoader(ds, batch_size=None, num_workers=4).unbatched().shuffle(1000).batched(64).compose(stage)

It also works as the last stage of a ``wds.DataPipeline``, or on any iterable of batches. Batches are what
WebDataset's batching produces: tuples or dicts whose fields are tensors, numpy arrays (selected along axis 0;
numpy stays numpy) or lists such as ``__key__`` and ``__url__``, all subset consistently. The stage needs no
WebDataset import and decodes nothing: decoding (and its safety) stays in the user's pipeline.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from torch import nn

from sbdata._front import EngineFront, check_not_in_worker
from sbdata._util import Unpack
from sbdata.engine import EngineOptions, LossFn, SelectionEngine

__all__ = ["SelectStage", "sb_select"]

_FIX = (
    "compose it after the loader, in the training process: wds.WebLoader(ds, ...).compose(sb_select(...)) or "
    "the last stage of a DataPipeline iterated by the training loop, not inside the dataset the workers run"
)


def _sb_select(selected: Iterator[Any]) -> Iterator[Any]:
    """Yield the selected batches of the pass the caller started (its iterator, made when the pass started)."""
    check_not_in_worker("sbdata.wds.sb_select", _FIX)
    yield from selected


class SelectStage(EngineFront):
    """The stage :func:`sb_select` returns: call it on an iterator of batches to get the selected batches.

    Each call is one epoch of its input in the engine's step count. It holds the engine, so the selection state can be
    checkpointed with :meth:`state_dict` next to the model's. After :meth:`load_state_dict`, the next call
    continues the saved epoch (queued and pooled samples first, then the new input); restoring the input's
    position is the input's job: a source that restarts from its beginning should skip :attr:`resume_skip`
    batches. Each call starts a pass and ends the previous call's iterator, which raises ``RuntimeError`` if it is
    used again: one stage is one stream.

    Args:
        model: the live model being trained.
        loss_fn: ``loss_fn(outputs, targets, reduction='none')`` or a loss module.
        **options: keyword options of :class:`~sbdata.SelectionEngine` (see :class:`~sbdata.EngineOptions`).
    """

    def __init__(self, model: nn.Module, loss_fn: LossFn, **options: Unpack[EngineOptions]) -> None:
        self.engine = SelectionEngine(model, loss_fn, **options)

    def __call__(self, data: Iterable[Any]) -> Iterator[Any]:
        if not isinstance(data, Iterable):
            raise TypeError(f"sb_select stages take an iterable of batches, got {type(data).__name__}")
        self.engine.start_pass()
        return _sb_select(self.engine.iterate(iter(data)))  # owned by this pass from now, not from its first next()

    @property
    def resume_skip(self) -> int:
        """Batches of the saved epoch already consumed, to skip in a source that restarts from its beginning
        (0 unless a state was loaded and its epoch had not ended)."""
        return self.engine.source_position if self.engine.continues_saved_epoch else 0


def sb_select(model: nn.Module, loss_fn: LossFn, **options: Unpack[EngineOptions]) -> SelectStage:
    """A WebDataset stage that keeps the samples worth a backward pass: ``stage(batches) -> batches``.

    Args:
        model: the live model being trained.
        loss_fn: ``loss_fn(outputs, targets, reduction='none')`` or a loss module.
        **options: keyword options of :class:`~sbdata.SelectionEngine` (keep, policy, schedule, split, ...);
            for WebDataset dicts pass e.g. ``split=lambda b: (b["npy"], b["cls"])``.

    Returns:
        A :class:`SelectStage`, usable in ``.compose(...)`` and ``wds.DataPipeline(..., stage)``.
    """
    return SelectStage(model, loss_fn, **options)
