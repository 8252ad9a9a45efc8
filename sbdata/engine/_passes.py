"""The engine's passes: which loader batch, epoch and pass it is at, and where a loaded state resumes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from sbdata.batch import decode, encode

NESTED = (
    "sbdata: a selection stage inside another: this loader's batches come from one that already selects (an SBLoader, "
    "an SBCollator as its collate_fn, a sbdata.nodes.SBSelector or an sb_select stage), so every batch would be "
    "scored and cut twice. Wrap the plain loader once (a trainer integration wraps it for you: give it the plain "
    "loader)"
)


class _Selecting(threading.local):
    """The engine whose loader batch this thread is processing, if any (one per thread)."""

    engine: object | None = None

    def enter(self, engine: object) -> None:
        if self.engine is not None and self.engine is not engine:
            raise RuntimeError(NESTED)
        self.engine = engine

    def leave(self) -> None:
        self.engine = None


_SELECTING = _Selecting()


def enter_selection(engine: object) -> None:
    """Mark this thread as processing one of ``engine``'s batches until :func:`leave_selection`.

    Raises:
        RuntimeError: when this thread is already inside another engine's batch (a selection stage reading
            another's batches), naming the fix.
    """
    _SELECTING.enter(engine)


def leave_selection() -> None:
    """This thread's batch is done (see :func:`enter_selection`)."""
    _SELECTING.leave()


class Passes:
    """Counts loader batches, epochs and passes for a :class:`~sbdata.SelectionEngine`, and decides resumption.

    Names: a *pass* is one ``iter()`` of a front end; it is one epoch of the source, except that the pass after a
    loaded state continues the saved epoch. A *step* here is one loader batch consumed (what a
    :class:`~sbdata.Schedule` counts), never an optimizer step.

    Attributes:
        step: loader batches processed over all epochs (what the schedule counts).
        epoch_step: loader batches processed in the current epoch.
        epochs_begun: epochs started so far (the current epoch is ``epochs_begun - 1``).
        held_batch: the loader batch taken from the source and not yet processed (:meth:`take`): one whose
            processing raised is processed again first. None when there is none (saved under the state key
            ``"held_batch"``). Read-only outside this class.
        pass_finished: the current pass has told its consumer that it ended (``StopIteration``; :meth:`finish`).
            Read-only outside this class.
        restored: a state was loaded and no pass has started since.
        pass_id: which pass iterators belong to; a new pass ends the iterators of the older ones.
    """

    def __init__(self) -> None:
        self.step = 0
        self.epoch_step = 0
        self.epochs_begun = 0
        self.held_batch: Any = None
        self.pass_finished = False
        self.restored = False
        self.pass_id = 0

    @property
    def epoch(self) -> int:
        """Index of the current epoch, from 0."""
        return max(0, self.epochs_begun - 1)

    @property
    def source_position(self) -> int:
        """Loader batches taken from the current epoch's source, the held pending one included."""
        return self.epoch_step + (self.held_batch is not None)

    @property
    def continues_saved_epoch(self) -> bool:
        """Whether the next pass continues a loaded state's epoch (one had begun, and it had not ended)."""
        return self.restored and self.epochs_begun > 0 and not self.pass_finished

    def start_pass(self, source_restored: bool) -> bool:
        """Begin a pass (ending the older passes' iterators); True when it continues the loaded state's epoch.

        A pass whose source was restored with the engine always continues, and is not yet finished: its source
        reports its own end. Otherwise a pass continues only a loaded epoch that had not ended. A state saved before
        any pass began holds no epoch to continue: the pass begins epoch 0, as it would have without the state.
        """
        continues = self.restored and self.epochs_begun > 0 and (source_restored or not self.pass_finished)
        self.restored = False
        self.pass_id += 1
        if continues and source_restored:
            self.pass_finished = False
        return continues

    def iterate(self, next_output: Callable[[Iterator[Any]], Any], source: Iterator[Any]) -> Iterator[Any]:
        """``next_output(source)`` until ``StopIteration``, as a generator owned by the current pass.

        Raises:
            RuntimeError: when advanced after a newer pass started.
        """
        return self._owned(self.pass_id, next_output, source)  # owned by the pass current now, not at first next()

    def _owned(self, owner: int, next_output: Callable[[Iterator[Any]], Any], source: Iterator[Any]) -> Iterator[Any]:
        while True:
            if owner != self.pass_id:
                raise RuntimeError(
                    "this iterator was ended because a new pass over the same selection engine started (another "
                    "iter() or for loop over the SBLoader, or another call of the stage): finish or drop one "
                    "iterator before starting the next, or build a second loader for a second concurrent stream"
                )
            try:
                out = next_output(source)
            except StopIteration:
                return
            yield out

    def take(self, source: Iterator[Any]) -> Any:
        """The loader batch to process next: the held one, else the source's next, held until :meth:`release`.

        Raises:
            StopIteration: when nothing is held and ``source`` has run out.
        """
        if self.held_batch is None:
            self.held_batch = next(source)
        return self.held_batch

    def release(self) -> None:
        """The held loader batch was processed: forget it."""
        self.held_batch = None

    def finish(self) -> None:
        """The current pass told its consumer that it ended (or a loaded epoch was ended without a pass)."""
        self.pass_finished = True

    def begin_epoch(self) -> None:
        """Start counting a new epoch (its first loader batch is ``epoch_step`` 0); forgets a pending batch."""
        self.epochs_begun += 1
        self.epoch_step = 0
        self.held_batch = None
        self.pass_finished = False

    def count(self) -> None:
        """One loader batch was processed."""
        self.step += 1
        self.epoch_step += 1

    def state_dict(self) -> dict[str, Any]:
        """Counters and the pending batch (encoded for ``torch.load(..., weights_only=True)``)."""
        return {
            "step": self.step,
            "epoch_step": self.epoch_step,
            "epochs_begun": self.epochs_begun,
            "pass_finished": self.pass_finished,
            "held_batch": None if self.held_batch is None else encode(self.held_batch, "held loader batch"),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters; the next pass may continue the loaded epoch (see :meth:`start_pass`)."""
        self.step = int(state["step"])
        self.epoch_step = int(state["epoch_step"])
        self.epochs_begun = int(state["epochs_begun"])
        self.pass_finished = bool(state["pass_finished"])
        self.held_batch = None if state["held_batch"] is None else decode(state["held_batch"])
        self.restored = True
