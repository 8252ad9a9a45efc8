"""SBLoader: Selective Backprop around any iterable of batches."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import _guards
from ._front import EngineFront
from .engine import SelectionEngine

__all__ = ["SBLoader"]


def set_epoch_on(loader: Any, epoch: int) -> None:
    """Call ``set_epoch(epoch)`` on the loader, or else on its sampler, batch sampler and dataset that have one."""
    if callable(getattr(loader, "set_epoch", None)):
        loader.set_epoch(epoch)
        return
    batch_sampler = getattr(loader, "batch_sampler", None)
    candidates = (
        getattr(loader, "sampler", None),
        batch_sampler,
        getattr(batch_sampler, "sampler", None),
        getattr(loader, "dataset", None),
    )
    seen: set[int] = set()
    for target in candidates:
        if target is not None and id(target) not in seen and callable(getattr(target, "set_epoch", None)):
            seen.add(id(target))
            target.set_epoch(epoch)


class SBLoader(EngineFront):
    """Yield only the samples worth a backward pass, already on the model's device.

    Wraps a DataLoader, any iterable of batches, or a zero-argument factory returning a fresh iterator per epoch.
    Each pass over the SBLoader is one epoch of the wrapped loader. All selection options are those of
    :class:`~sbdata.SelectionEngine` (keep, policy, schedule, scale_factor, device, score_mode, autocast_dtype,
    split, forward, reduce, generator, nan_policy, batch_size, drop_last, return_weights, id_key, cache, sync,
    process_group). Under ``torch.distributed`` every rank yields the same number of batches per epoch; see
    ``docs/distributed.md``.

    State: :meth:`state_dict` may be taken between any two yielded batches. It holds the engine's state (step
    counter, schedule position, generator, policy, pool, loss cache) and, if the wrapped loader has ``state_dict`` (e.g.
    ``torchdata.stateful_dataloader.StatefulDataLoader``), the loader's, so the resumed pass continues exactly.
    For a loader without state, the resumed pass re-iterates it and skips the batches already consumed this
    epoch, which reproduces the run only if the loader yields the same order again (no shuffling, or a seeded
    sampler generator).

    Args:
        loader: the batches to select from.
        model: the live model being trained.
        loss_fn: ``loss_fn(outputs, targets, reduction='none')`` or a loss module.
        **options: keyword options of :class:`~sbdata.SelectionEngine`.
    """

    ENGINE_KEY = "engine"
    LOADER_KEY = "loader"
    RANK_KEY = "rank"  # the rank that saved the state: loading it on another rank warns

    def __init__(
        self, loader: Iterable[Any] | Callable[[], Iterable[Any]], model: Any, loss_fn: Any, **options: Any
    ) -> None:
        if not isinstance(loader, Iterable) and not callable(loader):
            raise TypeError(
                f"loader must be an iterable of batches or a zero-argument factory of one, got {type(loader).__name__}"
            )
        self.loader = loader
        self.engine = SelectionEngine(model, loss_fn, **options)
        self._resuming = False
        self._read_ahead = _guards.ReadAheadGuard(model)
        _guards.warn_if_unsharded(loader)

    def _stateful(self) -> bool:
        return callable(getattr(self.loader, "state_dict", None)) and callable(
            getattr(self.loader, "load_state_dict", None)
        )

    def __iter__(self) -> Iterator[Any]:
        skip = 0
        if self._resuming and self.engine.mid_epoch:
            skip = 0 if self._stateful() else self.engine.epoch_step
        else:
            self.engine.begin_epoch()
        self._resuming = False
        batches = self.loader if isinstance(self.loader, Iterable) else self.loader()
        source = iter(batches)
        if skip:
            source = itertools.islice(source, skip, None)
        return self._read_ahead.watch(self.engine.iterate(source))

    def __len__(self) -> int:
        """Batches yielded per epoch: the wrapped loader's length, when it has one and one batch is yielded per
        loader batch (no ``batch_size`` pool, a fixed-count policy)."""
        if self.engine.pool is not None or not self.engine.policy.fixed_count:
            raise TypeError("the number of batches is data-dependent with batch_size= or a variable-count policy")
        return len(self.loader)  # type: ignore[arg-type]

    @property
    def sampler(self) -> Any:
        """The wrapped loader's ``sampler`` (None if it has none), read-only, so that frameworks which call
        ``loader.sampler.set_epoch`` (Lightning) reach it. There is deliberately no ``dataset``: frameworks rebuild
        a loader that shows one (Lightning's ``overfit_batches``, Accelerate's ``skip_first_batches``) as a plain
        ``DataLoader``, which would drop selection."""
        return getattr(self.loader, "sampler", None)

    @property
    def batch_sampler(self) -> Any:
        """The wrapped loader's ``batch_sampler`` (None if it has none), read-only; see :attr:`sampler`."""
        return getattr(self.loader, "batch_sampler", None)

    def set_epoch(self, epoch: int) -> None:
        """Pass ``set_epoch`` on to the wrapped loader, or its sampler, batch sampler and dataset."""
        set_epoch_on(self.loader, epoch)

    def state_dict(self) -> dict[str, Any]:
        inner = self.loader.state_dict() if self._stateful() else None  # type: ignore[union-attr]
        rank = _guards.rank_and_world()[0]
        return {self.ENGINE_KEY: self.engine.state_dict(), self.LOADER_KEY: inner, self.RANK_KEY: rank}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state; the next pass over the SBLoader continues the saved epoch."""
        _guards.warn_if_other_rank(state.get(self.RANK_KEY))
        self.engine.load_state_dict(state[self.ENGINE_KEY])
        if state[self.LOADER_KEY] is not None:
            if not self._stateful():
                raise ValueError("the state holds the wrapped loader's state, but this loader has no load_state_dict")
            self.loader.load_state_dict(state[self.LOADER_KEY])  # type: ignore[union-attr]
        self._resuming = True
