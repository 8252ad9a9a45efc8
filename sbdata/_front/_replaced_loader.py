"""What a wrapped loader shows where the loader it replaced stood: its dataset, and its batches per epoch.

Training scripts read the replaced loader's ``dataset`` (``len(train_loader.dataset)`` in a progress print) and
``len()`` (``max_train_steps``, the LR scheduler). :class:`SelectedDataset` is the wrapped loader's dataset for
``len()``, indexing and its attributes, but never for rebuilding a loader from: a framework that reads it to rebuild
the loader as a plain ``DataLoader`` (which would train without selection) is stopped at once, before training,
with that framework's own fix (:func:`check_not_rebuilt`), and any other ``DataLoader`` built over it stops at its
first batch. :func:`pooled_batches_per_epoch` counts the batches a ``batch_size=`` pool yields per epoch.
"""

from __future__ import annotations

import math
import sys
from types import FrameType
from typing import Any

from torch.utils.data import BatchSampler, Dataset, SequentialSampler

from sbdata.policies import keep_count

__all__ = ["SelectedDataset", "check_not_rebuilt", "pooled_batches_per_epoch", "reader_frame"]

_ACCELERATE_FIX = (
    "accelerate's skip_first_batches rebuilds a plain DataLoader from SBLoader.dataset, which would train without "
    "selection. Fix: build the loader with sbdata.integrations.accelerate.wrap(accelerator, loader, model, loss_fn, "
    "...) after accelerator.prepare: that accelerator's skip_first_batches then hands the SBLoader back unchanged, "
    "and accelerator.load_state has already restored where its epoch stands"
)
_TRAINER_FIX = (
    "the Transformers Trainer resumes mid-epoch by rebuilding its training loader from SBLoader.dataset "
    "(accelerate's skip_first_batches), which would train without selection, and its checkpoint holds no "
    "selection state. Fix: derive from sbdata.integrations.transformers.SBTrainer instead, passing the SBLoader's "
    "options as sb_options (trainer = SBTrainer(model=model, args=args, ..., sb_options={'keep': 0.5}), no "
    "get_train_dataloader override): it saves the selection state with each checkpoint and continues the epoch "
    "exactly"
)
_LIGHTNING_FIX = (
    "Lightning's overfit_batches replaces the sampler of a shuffling training loader by rebuilding it from its "
    "dataset, which would train without selection. Fix: build the training DataLoader with shuffle=False (or a "
    "SequentialSampler) when overfit_batches > 0; Lightning then keeps the SBLoader as it is"
)
_OTHER_FIX = (
    "a DataLoader built over SBLoader.dataset reads the data without selection (frameworks do this to skip "
    "batches on resume or to change the sampler). Fix: iterate the SBLoader itself and resume it with "
    "load_state_dict (or the integrations in sbdata.integrations); to read the data without selection on purpose, "
    "use sb.loader.dataset"
)
_LIGHTNING_REBUILDERS = ("_resolve_overfit_batches", "_update_dataloader", "_get_dataloader_init_args_and_kwargs")


def _module(frame: FrameType | None) -> str:
    return "" if frame is None else str(frame.f_globals.get("__name__", ""))


def _shuffles(sampler: Any) -> bool:
    """Whether a sampler reorders (Lightning's test is ``isinstance(sampler, SequentialSampler)``; a distributed
    sampler built with ``shuffle=False`` does not reorder either)."""
    return not isinstance(sampler, SequentialSampler) and getattr(sampler, "shuffle", True) is not False


def check_not_rebuilt(reader: FrameType | None, sampler: Any) -> None:
    """Stop a known framework that reads ``SBLoader.dataset`` to rebuild the loader without selection.

    Args:
        reader: the frame that reads ``dataset`` (the property's caller).
        sampler: the SBLoader's sampler (Lightning rebuilds only a loader whose sampler shuffles).

    Raises:
        RuntimeError: naming the framework's own fix, for Accelerate's ``skip_first_batches`` (called by the user
            or by the Transformers Trainer) and Lightning's ``overfit_batches``.
        AttributeError: when Lightning would rebuild a loader that does not shuffle: it then leaves it alone.
    """
    if reader is None:
        return
    if reader.f_code.co_name.startswith("<") and reader.f_back is not None:  # a comprehension's own frame
        reader = reader.f_back
    name, module = reader.f_code.co_name, _module(reader)
    if module.startswith("accelerate.") and name == "skip_first_batches":
        caller = reader.f_back
        while caller is not None and _module(caller).startswith("accelerate."):
            caller = caller.f_back
        raise RuntimeError(_TRAINER_FIX if _module(caller).startswith("transformers.") else _ACCELERATE_FIX)
    if module.startswith(("lightning.", "pytorch_lightning.", "lightning_fabric.")) and name in _LIGHTNING_REBUILDERS:
        if not _shuffles(sampler):
            raise AttributeError("SBLoader.dataset is not shown to Lightning's rebuild of a loader in order")
        raise RuntimeError(_LIGHTNING_FIX)


class SelectedDataset(Dataset[Any]):
    """The dataset of the loader an SBLoader wraps, for ``len()``, indexing and its attributes only.

    ``len()`` is the number of samples the wrapped loader reads per epoch (``len(train_loader.dataset)`` in a
    progress print counts what selection chooses from, not what it trains on); ``dataset[i]`` and any attribute
    (``.classes``, ``.features``) are the source's. A ``DataLoader`` built over it raises at its first batch,
    naming the fix: it would read the data without selection. ``source`` is the dataset itself.

    Args:
        source: the wrapped loader's dataset.
    """

    def __init__(self, source: Any) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: Any) -> Any:
        return self.source[index]

    def __getitems__(self, indices: list[int]) -> Any:  # what a DataLoader's fetcher calls, and nothing else
        raise RuntimeError(_OTHER_FIX)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "source":  # pickling and copying look these up: not delegated
            raise AttributeError(name)
        return getattr(self.source, name)

    def __repr__(self) -> str:
        return f"SelectedDataset({self.source!r})"


def reader_frame() -> FrameType | None:
    """The frame that read the property calling this (two frames up)."""
    return sys._getframe(2)


def pooled_batches_per_epoch(loader: Any, keep: float, batch_size: int, drop_last: bool, active: Any) -> int:
    """Batches a ``batch_size=`` pool yields in one epoch of ``loader``, with a fixed-count policy keeping
    ``keep_count(keep, B)`` of each SB step's ``B`` samples and a plain step all of them.

    Exact for a loader whose batches are cut by torch's ``BatchSampler`` from a sampler with ``len()`` (a
    ``DataLoader`` with ``batch_size=``, any sampler, ``DistributedSampler`` included), and for Accelerate's
    ``BatchSamplerShard`` with ``even_batches`` (its default; every process gets full batches).

    Args:
        loader: the wrapped loader.
        keep: the share kept on an SB step.
        batch_size: the pool's output batch size.
        drop_last: whether the pool drops its short last batch.
        active: ``active(batch_idx) -> bool``, whether a loader batch of the epoch is an SB step.

    Raises:
        TypeError: for a loader whose batch sizes cannot be known before the epoch, naming the fix.
    """
    sizes = _batch_sizes(loader)
    kept = sum(keep_count(keep, size) if active(i) else size for i, size in enumerate(sizes))
    return kept // batch_size if drop_last else math.ceil(kept / batch_size)


def _batch_sizes(loader: Any) -> list[int]:
    """The size of every batch of one epoch of ``loader``, known without iterating it.

    Raises:
        TypeError: for a loader whose batch sizes cannot be known before the epoch, naming the fix.
    """
    batch_sampler = getattr(loader, "batch_sampler", None)
    if type(batch_sampler).__name__ == "BatchSamplerShard":  # Accelerate's, several processes (by name: no import)
        shard: Any = batch_sampler
        if not shard.split_batches and shard.even_batches and shard.batch_size is not None:
            return [shard.batch_size] * len(shard)  # every process gets full batches, looping back at the end
    elif type(batch_sampler) is BatchSampler and hasattr(batch_sampler.sampler, "__len__"):
        sampler: Any = batch_sampler.sampler
        samples, per_batch = len(sampler), batch_sampler.batch_size
        sizes = [per_batch] * (samples // per_batch)
        if samples % per_batch and not batch_sampler.drop_last:
            sizes.append(samples % per_batch)
        return sizes
    raise TypeError(
        f"with batch_size= the batches per epoch depend on the size of every loader batch, which this "
        f"{type(loader).__name__} does not show (no torch BatchSampler over a sampler with len(), nor Accelerate's "
        "even shards): count the batches as you go, or drop batch_size= (then len() is the loader's)"
    )
