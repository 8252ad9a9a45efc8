"""One-time warnings for setups that would train on the wrong data without an error.

Each check is called from one line of a front end; each warns once per object, naming the fix:

- :class:`ReadAheadGuard`: the consumer reads batches ahead of training (Lightning's prefetch for a loader without
  ``len()``, ``list(loader)``), so batches are scored with parameters that change before they are trained on.
- :func:`warn_if_unsharded`: under a process group of several ranks, the wrapped loader shows no sharding, so every
  rank would read the same data (under Accelerate it refuses: the wrong order, ``accelerator.prepare(SBLoader(...))``).
- :func:`warn_if_other_rank`: a state saved on one rank is loaded on another.
- :func:`refuse_other_shape`: a mid-epoch state is loaded into a loader of another length or batch size (raises).
- :func:`warn_if_unsaved_buffer`: a checkpoint of a loader whose own state leaves out a shuffle buffer.

Each warns through :func:`sbdata._util.warn_from_user_code`, so that it names the user's line.
"""

from __future__ import annotations

import collections
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DistributedSampler, IterableDataset

from sbdata._util import warn_from_user_code
from sbdata.distributed import rank_and_world

__all__ = ["ReadAheadGuard", "refuse_other_shape", "warn_if_other_rank", "warn_if_unsaved_buffer", "warn_if_unsharded"]

_optimizer_steps = 0  # optimizer steps taken in this process, by any optimizer (counted once the first guard exists)
_step_hook: Any = None
_handing_out: Any = None  # weak reference to the guard that handed out the latest batch: backward passes are its


def _count_step(*_: Any) -> None:
    global _optimizer_steps
    _optimizer_steps += 1


class ReadAheadGuard:
    """Warns once when a batch is trained on with parameters that changed after it was scored.

    Each batch handed out while the model is in training mode records a cheap signature of the parameters (the
    version counters of the first and last trainable parameter, bumped by every in-place update, and the count of
    ``optimizer.step()`` calls, which also catches fused optimizers). A hook on the first trainable parameter
    fires once per backward pass (attributed to the loader that handed out the latest batch); it compares the
    oldest recorded signature with the current one. In a loop that
    trains on each batch as it arrives the two always agree, also under gradient accumulation (no step between
    scoring and backward) and when a trainer fetches an accumulation window ahead. They differ only when the
    consumer holds batches across an optimizer step: Lightning prefetching one batch from a loader without
    ``len()``, or ``list(loader)`` before training. Cost: a few integer reads per batch and per backward.

    Args:
        model: the model being trained (its trainable parameters are watched; none means no check).
    """

    WINDOW = 16  # signatures kept; a consumer further ahead than this is still caught by the older ones

    def __init__(self, model: nn.Module) -> None:
        self._model_ref = weakref.ref(model)
        self._self_ref = weakref.ref(self)
        self._pending: collections.deque[tuple[int, ...]] = collections.deque(maxlen=self.WINDOW)
        self._watched: tuple[torch.Tensor, ...] | None = None
        self.warned = False

    def _attach(self, model: nn.Module) -> None:
        global _step_hook
        trainable = [p for p in model.parameters() if p.requires_grad]
        self._watched = (trainable[0], trainable[-1]) if trainable else ()
        if not trainable:
            return
        if _step_hook is None:
            _step_hook = register_optimizer_step_post_hook(_count_step)
        guard = self._self_ref

        def on_backward(_: torch.Tensor) -> None:
            alive = guard()
            if alive is not None and _handing_out is guard:  # another loader's batches are not this one's
                alive.backward_seen()

        handle = trainable[0].register_post_accumulate_grad_hook(on_backward)
        weakref.finalize(self, handle.remove)

    def _signature(self) -> tuple[int, int, int]:
        first, last = self._watched  # type: ignore[misc]  # only asked once parameters are watched
        return (_optimizer_steps, first._version, last._version)

    def watch(self, batches: Iterator[Any]) -> Iterator[Any]:
        """Yield ``batches`` unchanged, recording a signature for each one handed out to a training model."""
        global _handing_out
        pending, model_ref, self_ref = self._pending, self._model_ref, self._self_ref
        pending.clear()
        for batch in batches:
            model = model_ref()
            if model is not None and model.training and not self.warned:
                if self._watched is None:
                    self._attach(model)
                if self._watched:
                    first, last = self._watched  # _signature(), inline: once per batch
                    pending.append((_optimizer_steps, first._version, last._version))
                    _handing_out = self_ref
            yield batch

    def backward_seen(self) -> None:
        """Called once per backward pass: the oldest batch handed out is taken to be the one trained on."""
        if not self._pending or self.warned:
            return
        scored = self._pending.popleft()
        if scored != self._signature():
            self.warned = True
            self._pending.clear()
            warn_from_user_code(  # the user's backward() line, or, from a backward thread, their next batch
                "sbdata: a batch was trained on after an optimizer step that came after it was scored: whatever "
                "iterates the loader reads batches ahead (Lightning prefetches one batch from a loader without "
                "len(), e.g. SBLoader(batch_size=...); list(loader) before training), so selection ranks with "
                "parameters one or more steps old and a checkpoint misses the batches read ahead. Fix: take one "
                "batch per training step (under Lightning use sbdata.integrations.lightning, or drop batch_size=; "
                "under Ray Train wrap what prepare_data_loader returns, not the other way round; in your own loop, "
                "iterate the loader directly)",
                RuntimeWarning,
            )


def _shows_sharding(obj: Any) -> bool:
    if isinstance(obj, DistributedSampler):
        return True
    # torch and Lightning samplers (num_replicas, rank), Accelerate's shards (num_processes, process_index)
    return (hasattr(obj, "num_replicas") and hasattr(obj, "rank")) or (
        hasattr(obj, "num_processes") and hasattr(obj, "process_index")
    )


def _unsharded(loader: Any) -> bool:
    """Whether ``loader`` is a DataLoader-like object over a map-style dataset with no sharding in its samplers.

    Anything else (a factory, a plain iterable, an iterable dataset, Accelerate's dispatcher) may shard in ways
    not visible from outside, so it is not reported.
    """
    if not (hasattr(loader, "sampler") or hasattr(loader, "batch_sampler")) or not hasattr(loader, "dataset"):
        return False
    if isinstance(loader.dataset, IterableDataset) or type(loader).__name__ == "DataLoaderDispatcher":
        return False
    batch_sampler = getattr(loader, "batch_sampler", None)
    parts = (
        loader,
        getattr(loader, "sampler", None),
        batch_sampler,
        getattr(batch_sampler, "sampler", None),
        getattr(batch_sampler, "batch_sampler", None),  # Accelerate's BatchSamplerShard wraps the batch sampler
        loader.dataset,
    )
    return not any(part is not None and _shows_sharding(part) for part in parts)


def _under_accelerate() -> bool:
    """Whether this process trains under a Hugging Face ``Accelerator`` (read without importing accelerate)."""
    state = sys.modules.get("accelerate.state")
    return state is not None and bool(state.is_initialized())


def warn_if_unsharded(loader: Any) -> None:
    """Warn when several ranks train and ``loader`` would give each of them the same data; under Accelerate, refuse.

    Raises:
        RuntimeError: under an ``Accelerator`` of several processes, for an unprepared loader: the wrong order
            ``accelerator.prepare(SBLoader(loader, ...))``, which Accelerate passes through unsharded.
    """
    world = rank_and_world()[1]
    if world > 1 and _unsharded(loader) and _under_accelerate():
        raise RuntimeError(
            f"sbdata: Accelerate runs {world} processes but SBLoader wraps a {type(loader).__name__} that "
            "accelerator.prepare has not sharded, so every process would train on the same data "
            "(accelerator.prepare(SBLoader(loader, ...)) passes the SBLoader through untouched). Prepare first, "
            "then wrap: loader = accelerator.prepare(loader); sb = sbdata.integrations.accelerate.wrap(accelerator, "
            "loader, model, loss_fn, ...)"
        )
    if world > 1 and _unsharded(loader):
        warn_from_user_code(
            f"sbdata: torch.distributed runs {world} ranks but the wrapped {type(loader).__name__} shows no "
            "DistributedSampler or other sharding, so every rank would train on the same data: build it with "
            "sampler=DistributedSampler(dataset) (and call set_epoch each epoch), or under Accelerate prepare the "
            "DataLoader first and then wrap it (SBLoader(accelerator.prepare(loader), ...)); under Lightning use "
            "sbdata.integrations.lightning. A dataset already split per rank (datasets.distributed."
            "split_dataset_by_node, a file list per rank) is sharded in a way sbdata cannot see: then add no sampler "
            "(that would shard twice) and silence this with warnings.filterwarnings('ignore', "
            "message='sbdata: torch.distributed runs')",
            RuntimeWarning,
        )


def warn_if_other_rank(saved_rank: Any) -> None:
    """Warn when a state saved by rank ``saved_rank`` is loaded by a different rank."""
    rank, world = rank_and_world()
    if world > 1 and saved_rank is not None and int(saved_rank) != rank:
        warn_from_user_code(
            f"sbdata: rank {rank} loads a selection state saved by rank {saved_rank}: each rank has its own state "
            "(generator, policy history, cache, position), and a checkpoint written by rank 0 alone restores it "
            "wrongly. Save and load one state per rank: sbdata.integrations.accelerate.save_sb_state/load_sb_state, "
            "sbdata.integrations.lightning or sbdata.integrations.transformers do it for you",
            RuntimeWarning,
        )


def refuse_other_shape(saved: list[Any], current: list[Any]) -> None:
    """Refuse a mid-epoch state whose loader had another number of batches per epoch or batch size than this one
    (``[batches, batch_size]`` each; None where unknown, which matches anything): its position would continue
    another epoch.

    Raises:
        ValueError: naming both shapes and the fix.
    """
    differs = any(a is not None and b is not None and a != b for a, b in zip(saved, current, strict=True))
    if differs:
        raise ValueError(
            f"this state was saved mid-epoch from a loader of {saved[0]} batches of {saved[1]}, but this loader has "
            f"{current[0]} batches of {current[1]}: its position in the saved epoch would continue another epoch "
            "(batches skipped or repeated). Resume with the loader built as it was (the same dataset and batch "
            "size), or load a state saved at an epoch's end"
        )


def warn_if_unsaved_buffer(loader: Any) -> None:
    """Warn when ``loader`` resumes from its own state but shuffles through a buffer that state leaves out: a Hugging
    Face ``datasets.IterableDataset.shuffle(buffer_size=...)`` (its ``_shuffling``), whose buffered samples a resume
    loses. The caller warns once per loader."""
    dataset = getattr(loader, "dataset", None)
    if getattr(dataset, "_shuffling", None) is None or not type(dataset).__module__.startswith("datasets."):
        return
    warn_from_user_code(
        f"sbdata: the wrapped {type(loader).__name__} resumes from its own state_dict, and its datasets."
        "IterableDataset shuffles through a buffer (shuffle(buffer_size=...)) that the state does not hold: a "
        "resume loses the buffered samples of the saved epoch, so it is only as exact as that state. For an exact "
        "resume, shuffle a map-style Dataset (its sampler's order is replayed) or do without the buffer",
        RuntimeWarning,
    )
