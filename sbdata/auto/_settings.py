"""``keep="auto"``: select only where trials on the user's own run measure that it pays (``docs/method_card.md``,
"Does selection pay?").

:class:`Auto` holds the settings; ``sbdata.engine``'s ``AutoController`` applies them. A trial needs the run's
length (``Auto(epochs=...)``, ``Auto(run=...)``, a Schedule's ``total_steps``, or a trainer integration's plan):
without it no trial runs, training goes on whole batches, as the user wrote it, and a warning says once how to state
the length. With it, training starts on whole batches. After ``warmup`` loader batches, a *trial* trains ``window``
batches at a time with each arm in a palindromic order (plain, then each share of ``keeps``, and back:
:func:`trial_order`), scoring every batch before training on it, and fits each arm's progress per
window (:func:`fit_progress`). The arm with the most progress per second is chosen when its measured
speed-up clears ``1 + margin`` by ``z`` standard errors (:func:`verdict`); otherwise training goes on
as plain. A new trial re-checks each decision ``2 every`` loader batches later, twice as long after each verdict
that repeats the last; while selection is on it stays on unless a trial measures it below whole batches. Trial
windows are training, not discarded work, so a trial bounds their harm: a selection window measured below whole
batches stops it at once (``stop_z``), and a trial whose selection windows would take more than ``trial_share`` of
the run left is not run. Decisions are read from copies issued a window earlier, so they never wait for the device,
and under ``torch.distributed`` one ``all_reduce`` of the trial's sums makes every rank decide alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sbdata.auto._gain import CostTable

__all__ = ["Auto", "Keep"]

SIZED = ("window", "settle", "warmup", "every")  # None: sized from the run (Auto.sized)
WINDOW, SETTLE = 16, 48  # window and settle of a long epoch or a stream


@dataclass(frozen=True)
class Auto:
    """Settings of ``keep="auto"`` (``"auto"`` is ``Auto()``; the same defaults for every policy and task). Why each
    default is what it is, with the measurements: ``docs/method_card.md``, "Does selection pay?".

    A trial is ``cycles`` palindromes of ``2 (len(keeps) + 1)`` windows of ``settle + window`` loader batches (with
    the defaults on an epoch of 320 loader batches or more: 8 windows of 48 + 16, 512 batches, half of them
    selection), after ``warmup`` batches; :meth:`sized` fills the sizes left None from the epoch's length. Each of a
    window's first ``settle`` batches also measures the previous window's averaged model: one more forward per
    measured batch. No trial runs without the run's length (``epochs``, ``run``, a Schedule's ``total_steps`` or a
    trainer integration's plan).

    Attributes:
        keeps: the shares trialled against plain training, each in (0, 1), distinct. Default (0.25,); each more
            share adds two windows per cycle.
        window: loader batches per trial window over which progress is measured, an int >= 1. Default None: sized
            from the run (:meth:`sized`), 16 for an epoch of 320 loader batches or more.
        settle: loader batches at the start of each trial window, on which the previous window's averaged model is
            measured before they are trained on, an int >= 1. Default None: sized from the run, 48 for an epoch of
            320 loader batches or more.
        cycles: palindromes per trial, an int >= 1; the fit needs more windows than ``len(keeps) + 3``. Default 2.
        warmup: loader batches of plain training before the first trial, an int >= 0. Default None: 64, or one
            epoch if shorter.
        every: sets the wait between a decision and the next trial, an int >= 1: after the ``n``-th verdict in a
            row that is the same (on, or off) the wait is ``every * 2 ** n`` loader batches. A trial while selection
            is on (the exit test) keeps it on unless it measures below whole batches by ``z`` standard errors.
            Default None: 1024, or 8 epochs if shorter.
        z: standard errors by which the measured speed-up must clear ``1 + margin``, >= 0. Default 1.0.
        margin: see ``z``, >= 0. Default 0.05.
        costs: a fixed :class:`~sbdata.CostTable` (tests; or a calibrated one); None measures live.
        clock: seconds for the live measurement; None uses ``time.thread_time`` on the CPU, CUDA events for the
            scoring pass on CUDA. Ignored with ``costs``.
        decisions_kept: decisions kept in ``stats.auto_decisions``, an int >= 1. Default 32.
        min_kept: the fewest samples a trialled share may keep of the largest loader batch seen, an int >= 1. A
            trial whose smallest share keeps fewer (on any rank) is not run (a decision for whole batches, said
            once). Default 2.
        epochs: epochs of the whole run, an int >= 1: the run is ``epochs * len(loader)`` loader batches (the
            loader :class:`~sbdata.SBLoader` wraps; a loader without ``len()`` raises ``ValueError``, naming
            ``run=``). Excludes ``run``. Default None.
        run: loader batches of the whole run (every loader batch, selected or not), an int >= 1. Excludes
            ``epochs``. Default None: ``epochs * len(loader)``, else a :class:`~sbdata.Schedule`'s
            ``total_steps``, else the plan of the trainer integration that built the loader; with none of them the
            run's length is not known and no trial runs (whole batches).
        trial_share: the most a trial's selection windows may take of the loader batches left in the run when it
            starts, in (0, 1]: a trial that would take more is not run (a decision for whole batches, said once).
            Default 0.125.
        stop_z: a trial while selection is off stops at once, for whole batches, when a selection window's
            measured level (the quality of its averaged model) falls this many standard errors (its own and whole
            batches' level's, from the measured samples' spread) below the level of the last whole-batch window
            before it. Checked as each selection window's measurement lands (``window`` loader batches after it is
            made). The next trial comes when it would have after the trial's verdict. Not while selection is on:
            the exit test decides there. A number > 0; ``math.inf`` never stops. Default 2.0.
    """

    keeps: tuple[float, ...] = (0.25,)
    window: int | None = None
    settle: int | None = None
    cycles: int = 2
    warmup: int | None = None
    every: int | None = None
    z: float = 1.0
    margin: float = 0.05
    costs: CostTable | None = None
    clock: Callable[[], float] | None = None
    decisions_kept: int = 32
    min_kept: int = 2
    epochs: int | None = None
    run: int | None = None
    trial_share: float = 0.125
    stop_z: float = 2.0

    def __post_init__(self) -> None:
        keeps = self.keeps
        if (
            not isinstance(keeps, tuple)
            or not keeps
            or any(isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k < 1 for k in keeps)
            or len(set(keeps)) != len(keeps)
        ):
            raise ValueError(f"Auto.keeps got {keeps!r}: pass a tuple of distinct shares in (0, 1), e.g. (0.25, 0.5)")
        _check_number("z", self.z, lambda v: 0 <= v < math.inf, "a finite number >= 0, e.g. 1.0")
        _check_number("margin", self.margin, lambda v: 0 <= v < math.inf, "a finite number >= 0, e.g. 0.05")
        _check_number("trial_share", self.trial_share, lambda v: 0 < v <= 1, "a share in (0, 1], e.g. 0.125")
        _check_number("stop_z", self.stop_z, lambda v: v > 0, "a number > 0 (math.inf: never stop), e.g. 2.0")
        if self.epochs is not None and (isinstance(self.epochs, bool) or not isinstance(self.epochs, int)
                                        or self.epochs < 1):  # fmt: skip
            raise ValueError(f"Auto.epochs must be the epochs of the whole run, an int >= 1, or None, got "
                             f"{self.epochs!r}: pass e.g. Auto(epochs=10)")  # fmt: skip
        if self.run is not None and (isinstance(self.run, bool) or not isinstance(self.run, int) or self.run < 1):
            raise ValueError(
                f"Auto.run must be the loader batches of the whole run, an int >= 1, or None, got {self.run!r}: pass "
                "e.g. run=epochs * len(loader), or Auto(epochs=...)"
            )
        if self.epochs is not None and self.run is not None:
            raise ValueError("Auto takes epochs or run, not both: drop one of them")
        for name, low in (("window", 1), ("settle", 1), ("cycles", 1), ("warmup", 0), ("every", 1),
                          ("decisions_kept", 1), ("min_kept", 1)):  # fmt: skip
            value = getattr(self, name)
            if value is None and name in SIZED:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Auto.{name} must be an int >= {low}, got {value!r}: pass e.g. {name}=32")
        if self.costs is not None and not isinstance(self.costs, CostTable):
            raise TypeError(f"Auto.costs must be a sbdata.CostTable or None, got {type(self.costs).__name__}")
        if self.clock is not None and not callable(self.clock):
            raise TypeError(f"Auto.clock must be callable() -> seconds or None, got {type(self.clock).__name__}")

    def sized(self, epoch: int | None = None, run: int | None = None) -> Auto:
        """These settings with every None replaced for a run of ``epoch`` loader batches per epoch (None: not known,
        as for a stream): ``window`` ``round(epoch / 20)`` within [2, 16], ``settle`` ``round(0.15 epoch)`` within
        [2, 48] (16 and 48 when not known), ``warmup`` ``min(64, epoch)``, ``every`` ``min(1024, 8 epoch)``. A trial
        is then about 1.6 epochs of a long epoch and 3 of a short one (8 windows of 2 + 2 batches), so a short run
        still decides within a few epochs. :attr:`run` becomes the run's length in loader batches: the ``run`` set
        here, else ``epochs * epoch``, else the ``run`` passed (a Schedule's ``total_steps`` or a trainer's plan;
        None: not known); :attr:`epochs` becomes None.

        Raises:
            ValueError: for an ``epoch`` or ``run`` that is not an int >= 1 or None, or :attr:`epochs` without an
                ``epoch`` (a loader without ``len()``), naming ``run=`` as the fix.
        """
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1):
            raise ValueError(f"epoch must be the loader batches per epoch, an int >= 1, or None; got {epoch!r}")
        if run is not None and (isinstance(run, bool) or not isinstance(run, int) or run < 1):
            raise ValueError(f"run must be the loader batches of the whole run, an int >= 1, or None; got {run!r}")
        if self.epochs is not None and epoch is None:
            raise ValueError(
                f"Auto(epochs={self.epochs}) needs the loader's len() to count the run's batches, and this loader has "
                "none (a stream, or an IterableDataset without __len__): pass Auto(run=N) instead, N the loader "
                "batches of the whole run"
            )
        told = self.run if self.epochs is None or epoch is None else self.epochs * epoch
        window = WINDOW if epoch is None else min(WINDOW, max(2, round(epoch / 20)))
        settle = SETTLE if epoch is None else min(SETTLE, max(2, round(epoch * 0.15)))
        return replace(
            self,
            window=window if self.window is None else self.window,
            settle=settle if self.settle is None else self.settle,
            warmup=(64 if epoch is None else min(64, epoch)) if self.warmup is None else self.warmup,
            every=(1024 if epoch is None else min(1024, 8 * epoch)) if self.every is None else self.every,
            epochs=None,
            run=run if told is None else told,
        )

    def describe(self) -> str:
        """The settings a saved state depends on, for the options fingerprint."""
        return (
            f"auto(keeps={self.keeps}, window={self.window}, settle={self.settle}, cycles={self.cycles}, "
            f"warmup={self.warmup}, every={self.every}, z={self.z}, margin={self.margin}, min_kept={self.min_kept}, "
            f"run={self.run}, trial_share={self.trial_share}, stop_z={self.stop_z})"
        )


def _check_number(name: str, value: Any, ok: Callable[[float], bool], fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
        raise ValueError(f"Auto.{name} got {value!r}: pass {fix}")


@dataclass(frozen=True)
class Keep:
    """What ``keep=`` asks for, decoded and sized once (:meth:`from_input`); every part below the door receives this.

    Composer's ``Time.from_input`` shape: each accepted spelling of ``keep=`` (a share, None, ``"auto"``,
    :class:`Auto`) becomes one value, with the run's length, in one place: the engine's constructor, told the
    epoch's length and the trainer's plan by the front end that built it (:class:`~sbdata.SBLoader` knows the
    epoch's length; the other front ends are streams). The options check and the ``keep="auto"`` controller read its
    fields and never decode or size again.

    Attributes:
        share: the share an SB step keeps, in (0, 1]; with ``keep="auto"`` the largest trialled share (the one
            selection starts at when a trial turns it on).
        given: whether the user set ``keep`` (False for the default 0.5; a ``"history"`` policy's ``beta`` follows
            a given share only). Always True with ``keep="auto"``.
        auto: with ``keep="auto"``, its settings sized to the run (:meth:`Auto.sized`: no size left None); else None.
    """

    share: float
    given: bool
    auto: Auto | None = None

    @classmethod
    def from_input(cls, keep: Any, epoch: int | None = None, run: int | None = None) -> Keep:
        """Decode ``keep=`` with the run's length.

        Args:
            keep: a share in (0, 1], None (0.5, not given), ``"auto"`` or :class:`Auto` settings.
            epoch: loader batches per epoch, which sizes ``keep="auto"``'s trials and counts ``Auto(epochs=...)``;
                None for a stream or an unknown length.
            run: loader batches of the whole run where the user's ``Auto`` does not state it (a
                :class:`~sbdata.Schedule`'s ``total_steps``, or a trainer's plan); None when not known.

        Raises:
            ValueError: for a share outside (0, 1] or any other value, naming the accepted ones; for
                ``Auto(epochs=...)`` without an ``epoch``.
        """
        if isinstance(keep, str) and keep == "auto":
            keep = Auto()
        if isinstance(keep, Auto):
            sized = keep.sized(epoch, run)
            return cls(max(sized.keeps), True, sized)
        if keep is None:
            return cls(0.5, False)
        if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 < keep <= 1:
            raise ValueError(
                "keep must be in (0, 1] (the share of each batch to train on), 'auto' or sbdata.Auto(...), "
                f"got {keep!r}"
            )
        return cls(float(keep), True)
