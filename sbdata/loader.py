"""SBLoader: Selective Backprop around any iterable of batches."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any

from torch import nn

import sbdata._front as _front
import sbdata.distributed as _dist
from sbdata._front import EngineFront, SamplerOrder
from sbdata._util import Unpack, epoch_length, warn_from_user_code
from sbdata.engine import EngineOptions, LossFn, SelectionEngine

__all__ = ["SBLoader"]

_SPENT = object()  # what next() returns on a source that ran out while skipping consumed batches


def _skipped(source: Iterator[Any], consumed: int) -> Iterator[Any]:
    """``source`` less its first ``consumed`` batches, skipped on this one iterator (a loader that is its own
    iterator may start its epoch again on a second ``iter()``) and only when the first batch is asked for: a
    framework may call ``set_epoch`` between ``iter()`` and the first batch (Lightning does on a resume), and a
    ``DistributedSampler`` draws its epoch's order at the first batch."""
    for _ in range(consumed):
        if next(source, _SPENT) is _SPENT:
            return
    while (batch := next(source, _SPENT)) is not _SPENT:  # not `yield from`: it would call iter() again
        yield batch


def _set_epoch_on(loader: Any, epoch: int) -> None:
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
    :class:`~sbdata.SelectionEngine`, listed with their types in :class:`~sbdata.EngineOptions`. Under
    ``torch.distributed`` every rank yields the same number of batches per epoch; see ``docs/distributed.md``.

    State: :meth:`state_dict` may be taken between any two yielded batches, and loads with
    ``torch.load(..., weights_only=True)``. It holds the engine's state (step counter, schedule position, generator,
    policy, pool, loss cache) and, if the wrapped loader has a working ``state_dict`` (e.g.
    ``torchdata.stateful_dataloader.StatefulDataLoader``), the loader's, so the resumed pass continues exactly. For a
    loader without state, the resumed pass re-iterates it and skips the batches already consumed this epoch; the
    states of its sampler's generators (``DataLoader(..., generator=g)`` or ``sampler.generator``) at the start of
    the epoch are saved and restored first, so a seeded shuffle resumes exactly in any epoch, and so are the states
    of its samplers that have ``state_dict``/``load_state_dict`` (e.g. a ``PruningSampler``'s epoch plan). A
    checkpoint of a loader whose order cannot be replayed (e.g. ``shuffle=True`` without ``generator=``) warns once,
    naming the fix.

    Iteration: each ``iter()`` starts a pass (the next epoch, or the rest of a loaded state's epoch) and ends the
    previous pass's iterator, which raises ``RuntimeError`` if it is used again: one SBLoader is one stream.

    Args:
        loader: the batches to select from.
        model: the live model being trained.
        loss_fn: ``loss_fn(outputs, targets, reduction='none')`` or a loss module.
        planned: loader batches of the whole run as a trainer plans it, an int >= 1 (the Lightning and transformers
            integrations pass it); a script states its run with ``keep=Auto(epochs=N)``. Default None: not known.
        **options: keyword options of :class:`~sbdata.SelectionEngine` (see :class:`~sbdata.EngineOptions`).
    """

    LOADER_KEY = "loader"
    SHAPE_KEY = "shape"  # the wrapped loader's batches per epoch and batch size: a mid-epoch state needs the same
    ORDER_KEY = "order"
    SAMPLERS_KEY = "samplers"  # states of the loader's samplers that have state_dict (a stateless loader's)
    RANK_KEY = "rank"  # the rank that saved the state: loading it on another rank warns

    def __init__(
        self,
        loader: Iterable[Any] | Callable[[], Iterable[Any]],
        model: nn.Module,
        loss_fn: LossFn,
        planned: int | None = None,
        **options: Unpack[EngineOptions],
    ) -> None:
        if not isinstance(loader, Iterable) and not callable(loader):
            raise TypeError(
                f"loader must be an iterable of batches or a zero-argument factory of one, got {type(loader).__name__}"
            )
        if isinstance(loader, EngineFront) or isinstance(getattr(loader, "collate_fn", None), EngineFront):
            raise TypeError(
                f"SBLoader wraps a {type(loader).__name__} that already selects (an SBLoader, or a DataLoader whose "
                "collate_fn is an SBCollator), so every batch would be scored and cut twice: wrap the plain loader "
                "once (a trainer integration wraps it for you: give it the plain loader)"
            )
        self.loader = loader
        self.engine = SelectionEngine(model, loss_fn, epoch_length(loader), planned, **options)
        self._order = SamplerOrder(loader)
        self._stateless = not (
            callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))
        )
        self._loader_restored = False
        self._saved_shape: list[int | None] | None = None  # a loaded state's loader shape, until its pass starts
        self._buffer_checked = False  # whether a checkpoint looked for a shuffle buffer the loader's state leaves out
        self._read_ahead = _front.ReadAheadGuard(model)
        _front.warn_if_unsharded(loader)

    def __iter__(self) -> Iterator[Any]:
        if self._saved_shape is not None and self.engine.continues_saved_epoch:  # read now: after set_epoch
            _front.refuse_other_shape(self._saved_shape, self._shape())
        self._saved_shape = None
        continues = self.engine.start_pass()
        self._order.before_iter(continues, self.engine.source_ended)
        restored, self._loader_restored = self._loader_restored, False
        if continues and self.engine.source_ended:
            return self.engine.iterate(iter(()))  # the saved epoch only has held batches left
        batches = self.loader if isinstance(self.loader, Iterable) else self.loader()
        source: Iterator[Any] = iter(batches)
        if continues and not restored and self.engine.source_position:
            source = _skipped(source, self.engine.source_position)
        return self._read_ahead.watch(self.engine.iterate(source))

    def __len__(self) -> int:
        """Batches yielded per epoch, the clock a training script sizes ``max_train_steps`` and its LR schedule by.

        Without ``batch_size=``: the wrapped loader's length, one output batch per loader batch (an SB step yields
        ``keep_count(keep, B)`` of its ``B`` samples, a plain step all of them). With a ``batch_size=`` pool: the
        batches the pool yields in one epoch, counted from the loader's batch sizes and the share a fixed-count
        policy keeps (exact for a ``DataLoader`` cut by torch's ``BatchSampler``; the short last batch counts
        unless ``drop_last=True``).

        Raises:
            TypeError: when the count depends on the data, naming the fix: a variable-count policy
                (``"history"``), ``nan_policy="drop"``, ``keep="auto"`` with a pool, a pool under a clocked
                ``Schedule``, or a loader without ``len()``.
        """
        engine = self.engine
        if not engine.policy.fixed_count:
            raise TypeError(
                f"the number of batches is data-dependent with {engine.policy!r}, which keeps a varying number of "
                "samples: count the batches as you go, or use a fixed-count policy (topk, rank, random, importance)"
            )
        if engine.nan_policy == "drop":
            raise TypeError(
                "the number of batches is data-dependent with nan_policy='drop' (a batch with no finite loss "
                "yields nothing): count the batches as you go, or use nan_policy='keep'"
            )
        if not isinstance(self.loader, Sized):
            raise TypeError(
                f"the wrapped {type(self.loader).__name__} has no len(): count the batches as you go, or wrap a "
                "loader with len()"
            )
        if not engine.pooled:
            return len(self.loader)
        keep = engine.fixed_keep
        if keep is None:
            raise TypeError(
                "with keep='auto' and batch_size= the batches per epoch depend on the share auto chooses as it "
                "goes: count the batches as you go, or pass a fixed keep"
            )
        schedule = engine.schedule
        if schedule.fraction(0) is not None:
            raise TypeError(
                "with batch_size= and a Schedule with a clock (total_steps or progress) the batches per epoch "
                "change as selection switches on and off: count the batches as you go, or drop batch_size="
            )
        return _front.pooled_batches_per_epoch(
            self.loader, keep, engine.batch_size, engine.drop_last, lambda i: schedule.is_active(0, i)
        )

    @property
    def dataset(self) -> Any:
        """The wrapped loader's dataset as a :class:`~sbdata._front.SelectedDataset`: ``len()`` is the number of
        samples selection chooses from per epoch (not the number trained on), ``dataset[i]`` and its attributes are
        the dataset's own. It is never a way to rebuild the loader: Accelerate's ``skip_first_batches``, the
        Transformers Trainer's resume and Lightning's ``overfit_batches`` (which would train on a plain
        ``DataLoader`` rebuilt from it) stop before training with that framework's fix, and any ``DataLoader``
        built over it raises at its first batch. ``sb.loader.dataset`` is the dataset itself.

        Raises:
            AttributeError: when the wrapped loader has no ``dataset`` (so ``hasattr`` is False).
            RuntimeError: when a framework reads it to rebuild the loader, naming that framework's fix.
        """
        source = getattr(self.loader, "dataset", None)
        if source is None:
            raise AttributeError(f"SBLoader wraps a {type(self.loader).__name__}, which has no `dataset`")
        _front.check_not_rebuilt(_front.reader_frame(), self.sampler)
        return _front.SelectedDataset(source)

    @property
    def sampler(self) -> Any:
        """The wrapped loader's ``sampler`` (None if it has none), read-only, so that frameworks which call
        ``loader.sampler.set_epoch`` (Lightning) reach it."""
        return getattr(self.loader, "sampler", None)

    @property
    def batch_sampler(self) -> Any:
        """The wrapped loader's ``batch_sampler`` (None if it has none), read-only; see :attr:`sampler`."""
        return getattr(self.loader, "batch_sampler", None)

    @property
    def batch_size(self) -> int | None:
        """Samples per batch: with ``batch_size=``, the pool's (every batch but an epoch's last); without, the
        wrapped loader's (a plain step yields that many, an SB step ``keep_count(keep, batch_size)`` of them)."""
        if self.engine.pooled:
            return self.engine.batch_size
        return getattr(self.loader, "batch_size", None)

    @property
    def drop_last(self) -> bool:
        """With ``batch_size=``, whether the pool drops an epoch's short last batch; without, the wrapped
        loader's ``drop_last`` (False if it has none)."""
        if self.engine.pooled:
            return self.engine.drop_last
        return bool(getattr(self.loader, "drop_last", False))

    @property
    def num_workers(self) -> int:
        """The wrapped loader's ``num_workers`` (0 if it has none): selection itself runs in this process."""
        return int(getattr(self.loader, "num_workers", 0))

    def finish_spent_epoch(self) -> bool:
        """End a loaded epoch that has nothing left, so that the next pass begins the next epoch.

        A state saved after its epoch's last batch (before the loop saw the epoch end) continues that epoch, which
        has nothing more to yield; a trainer that counts the epoch as done (Lightning, the public Accelerate
        scripts' ``resume_step == 0``) asks for the next one instead. A restored stateful loader starts its next
        epoch itself; a loader without state is re-iterated to its end first, which moves its sampler's generator
        on as the uninterrupted run's last ``iter()`` did.

        Returns:
            Whether the loaded epoch was spent (and is now ended).
        """
        engine = self.engine
        spent = (
            engine.continues_saved_epoch
            and not engine.pooled
            and engine.outputs_ready == 0
            and isinstance(self.loader, Sized)
            and engine.source_position >= len(self.loader)
        )
        if not spent:
            return False
        if self._loader_restored:
            engine.end_saved_epoch()
            return True
        for _ in SBLoader.__iter__(self):  # this class's pass: a subclass's __iter__ may call this method
            raise RuntimeError("a spent saved epoch yielded a batch; please report this as an sbdata bug")
        return True

    def set_epoch(self, epoch: int) -> None:
        """Pass ``set_epoch`` on to the wrapped loader, or its sampler, batch sampler and dataset."""
        _set_epoch_on(self.loader, epoch)

    def _loader_state(self) -> Any:
        """The wrapped loader's state, or None when it has none; one that raises or returns something other than a
        dict (e.g. an Accelerate-prepared DataLoader without ``use_stateful_dataloader=True``) counts as stateless,
        after one warning."""
        if self._stateless:
            return None
        try:
            inner = self.loader.state_dict()  # type: ignore[union-attr]
        except Exception as error:  # any failure means: no usable state
            problem = f"raised {type(error).__name__}: {error}"
        else:
            if isinstance(inner, dict):
                return inner
            problem = f"returned a {type(inner).__name__}, not a dict"
        self._stateless = True
        warn_from_user_code(
            f"the wrapped loader's state_dict() {problem}; SBLoader treats it as a loader without state (a resume "
            "re-iterates it and skips the consumed batches). For exact resume from its own state, make its "
            "state_dict() work (e.g. accelerate's use_stateful_dataloader=True)"
        )
        return None

    def _shape(self) -> list[int | None]:
        return [epoch_length(self.loader), getattr(self.loader, "batch_size", None)]

    def _source_state(self) -> dict[str, Any]:
        inner = self._loader_state()
        if inner is not None and not self._buffer_checked:
            self._buffer_checked = True
            _front.warn_if_unsaved_buffer(self.loader)
        order = self._order.state(self.engine.source_ended, stateful=inner is not None)
        state = {self.LOADER_KEY: inner, self.ORDER_KEY: order, self.RANK_KEY: _dist.rank_and_world()[0]}
        state[self.SHAPE_KEY] = self._shape()
        samplers = self._order.sampler_states(stateful=inner is not None)
        return state if samplers is None else {**state, self.SAMPLERS_KEY: samplers}

    def _load_source_state(self, state: dict[str, Any]) -> None:
        self._saved_shape = state.get(self.SHAPE_KEY)  # checked as the resumed pass starts
        _front.warn_if_other_rank(state.get(self.RANK_KEY))
        inner = state.get(self.LOADER_KEY)
        if inner is not None:
            if not callable(getattr(self.loader, "load_state_dict", None)):
                raise ValueError("the state holds the wrapped loader's state, but this loader has no load_state_dict")
            self.loader.load_state_dict(inner)  # type: ignore[union-attr]
        self._loader_restored = inner is not None
        self._order.load(state.get(self.ORDER_KEY))
        self._order.load_sampler_states(state.get(self.SAMPLERS_KEY))
