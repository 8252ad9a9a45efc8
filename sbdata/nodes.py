"""SBSelector: the selection engine as a ``torchdata.nodes`` stage.

Put it last in the pipeline, after the stages that run in threads or processes, so that it runs in the thread
that trains::

    node = Batcher(ParallelMapper(SamplerWrapper(sampler), dataset.__getitem__, num_workers=4), batch_size=64)
    node = SBSelector(Mapper(node, default_collate), model, F.cross_entropy, keep=0.5)
    loader = Loader(node)  # loader.state_dict() / load_state_dict() resume mid-epoch exactly

The loading threads below the node (a ``ParallelMapper``'s, a ``Prefetcher``'s) are joined when a pass ends and by
:meth:`SBSelector.shutdown`, and a pipeline left mid-pass is shut down at interpreter exit: torchdata 0.11 joins them
only in a ``__del__`` that a reference cycle between ``Loader`` and its iterator can keep from running, and a thread
still alive while Python finalizes can abort the process (``terminate called without an active exception``).
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Iterator
from typing import Any

try:
    from torchdata.nodes import BaseNode
except ImportError as error:
    raise ImportError(
        'sbdata.nodes needs torchdata 0.11 (torchdata.nodes): pip install -e ".[torchdata]" from the clone'
    ) from error

from torch import nn

from sbdata._front import EngineFront, check_not_in_worker, check_thread
from sbdata._util import Unpack
from sbdata.engine import EngineOptions, LossFn, SelectionEngine

__all__ = ["SBSelector"]

_LIVE: weakref.WeakSet[SBSelector] = weakref.WeakSet()  # nodes whose loading threads the exit hook stops


def _stop_all() -> None:
    """The exit hook: stop the loading threads of every node still alive (a pipeline left mid-pass)."""
    for node in list(_LIVE):
        node.shutdown()


atexit.register(_stop_all)


def _torchdata_parts(node: Any) -> Iterator[Any]:
    """The objects below ``node`` in its pipeline: its ``BaseNode`` sources and the torchdata objects they hold
    (torchdata 0.11's iterators that own the threads, e.g. ``ParallelMapper``'s ``_ParallelMapperIter``), found
    through their attributes, lists and dicts, each once."""
    seen, stack = {id(node)}, [node]
    while stack:
        for value in vars(stack.pop()).values():
            values = (
                value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            )
            for part in values:
                below = isinstance(part, BaseNode) or type(part).__module__.startswith("torchdata.")
                if below and id(part) not in seen and hasattr(part, "__dict__"):
                    seen.add(id(part))
                    stack.append(part)
                    yield part


class SBSelector(BaseNode, EngineFront):
    """A ``BaseNode`` that takes batches from ``source`` and yields the samples worth a backward pass.

    Each ``reset()`` without a state starts an epoch of ``source``; ``reset(state)`` (what ``Loader`` does after
    ``load_state_dict``) restores the source and the engine (step counter, schedule position, generator, policy
    state, pooled and queued samples) from one ``get_state()``, so a resumed pipeline yields exactly the batches
    the uninterrupted one would have.

    Iteration: a node is an iterator with one position. ``iter(loader)`` again returns the same ``Loader``
    iterator, restarted at a new epoch (the old pass ends; nothing is shared). Two ``Loader`` objects over one
    node would interleave one stream: build one node per ``Loader``.

    Placement: the scoring pass must see the live model between optimizer steps. The node raises if it is iterated in a
    DataLoader worker process, or from a thread other than the one that built it (taken to be the thread that trains),
    which is what a ``Prefetcher``, ``PinMemory`` or thread-based ``ParallelMapper`` placed after it would do: the
    scoring forward would then race ``optimizer.step()``'s in-place updates and the training forward's normalisation
    buffers (which it unbinds for its pass, or restores with ``"train"``). Pass ``allow_other_threads=True`` only if you
    serialise the two yourself, e.g. a pipeline built in one thread and trained in another.

    Args:
        source: a ``BaseNode`` of batches (e.g. ``Batcher`` followed by a collate ``Mapper``).
        model: the live model being trained.
        loss_fn: ``loss_fn(outputs, targets, reduction='none')`` or a loss module.
        allow_other_threads: let a thread other than the building one iterate the node. Default False.
        **options: keyword options of :class:`~sbdata.SelectionEngine` (keep, policy, schedule, generator, ...).
    """

    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode,
        model: nn.Module,
        loss_fn: LossFn,
        *,
        allow_other_threads: bool = False,
        **options: Unpack[EngineOptions],
    ) -> None:
        super().__init__()
        if not isinstance(source, BaseNode):
            raise TypeError(
                f"source must be a torchdata.nodes.BaseNode of batches, got {type(source).__name__}: wrap an "
                "iterable in torchdata.nodes.IterableWrapper"
            )
        if not isinstance(allow_other_threads, bool):
            raise TypeError(f"allow_other_threads must be a bool, got {type(allow_other_threads).__name__}")
        self.source = source
        self.engine = SelectionEngine(model, loss_fn, **options)
        self.allow_other_threads = allow_other_threads
        self._owner = threading.get_ident()
        self._shut = False
        _LIVE.add(self)

    def shutdown(self) -> None:
        """Stop the loading threads below this node and wait for them (each torchdata part's own ``shutdown``, or
        in torchdata 0.11, which has none, its iterators' ``_shutdown``: a join of at most about 0.5 s per thread).
        Called when a pass ends and, for a pipeline left mid-pass, at interpreter exit; call it yourself when you
        abandon a pass. The pass it ends cannot go on: the next ``iter()`` of the ``Loader`` starts the threads
        again."""
        self._shut = True
        for part in _torchdata_parts(self):
            if type(part).__module__.startswith("torchdata."):
                stop = getattr(part, "shutdown", None) or getattr(part, "_shutdown", None)
                if callable(stop):
                    stop()

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._shut = False
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])
        if initial_state is not None:
            self.engine.load_state_dict(initial_state[self.ENGINE_KEY])
        # The restored source continues its saved position, so the pass does too, even at an ended epoch: the
        # source is asked again and reports its own end (a restored SamplerWrapper only advances its epoch on the
        # next reset() if it was asked for an item after the restore).
        self.engine.start_pass(source_restored=initial_state is not None)

    def next(self) -> Any:
        check_not_in_worker(
            "sbdata.nodes.SBSelector",
            "put it after the DataLoader's workers, as the last node of a torchdata.nodes pipeline iterated by the "
            "training process (use ParallelMapper for parallel loading before it)",
        )
        if not self.allow_other_threads:
            check_thread(
                self._owner,
                "sbdata.nodes.SBSelector",
                "Put it after any Prefetcher/PinMemory/thread ParallelMapper, as the last node before the Loader, "
                "or build it in the training thread; pass allow_other_threads=True only if you keep scoring and "
                "optimizer steps from overlapping yourself.",
            )
        if self._shut:
            raise RuntimeError(
                "this pipeline was shut down (SBSelector.shutdown()) in the middle of a pass: start a new pass with "
                "iter(loader) (or node.reset()), or load a state"
            )
        try:
            return self.engine.next_output(self.source)
        except StopIteration:
            self.shutdown()  # the pass ended: join the loading threads below now, not at some garbage collection
            self._shut = False  # ended, not cut short: asking again says StopIteration again
            raise

    def get_state(self) -> dict[str, Any]:
        return EngineFront.state_dict(self)

    def _source_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self.source.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise TypeError(
            "a node's state is loaded by its Loader: Loader(node).load_state_dict(state), then iterate the Loader "
            "(or call node.reset(state))"
        )
