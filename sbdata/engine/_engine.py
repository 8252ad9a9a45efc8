"""The selection engine: the one place where batches are scored, selected, pooled and emitted.

Front ends (:class:`~sbdata.SBLoader`, :class:`~sbdata.SBCollator`, ``sbdata.nodes.SBSelector``,
``sbdata.wds.sb_select``) only feed it loader batches and hand on what it emits; see ``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from sbdata._util import available_device, flush_deferred_warnings, model_device
from sbdata.auto import AutoController, FixedKeep, Keep
from sbdata.cache import LossCache
from sbdata.distributed import in_job, joined_late, make_lockstep, scoring_module
from sbdata.engine import _options
from sbdata.engine._emitter import Emitter
from sbdata.engine._intake import Intake
from sbdata.engine._options import (
    ForwardFn,
    IdKey,
    KeepArg,
    LossFn,
    NanPolicy,
    PolicyArg,
    ReduceFn,
    ScoreMode,
    ScoreName,
    SplitFn,
    SyncMode,
)
from sbdata.engine._passes import Passes, enter_selection, leave_selection
from sbdata.engine._precision import DEFAULT_CHECK_EVERY
from sbdata.engine._sb_step import SBStep
from sbdata.engine._schedule import Schedule
from sbdata.engine._stats import SBStats, StatsTracker
from sbdata.policies import SelectionPolicy
from sbdata.scoring import Scorer

__all__ = ["SelectionEngine"]


class SelectionEngine:
    """Scores loader batches with the live model and emits the selected samples.

    Per loader batch (see ``docs/design.md``): count the step and ask the schedule; move tensor fields to the
    scoring device; on a plain step emit the whole batch; on an SB step split it, score it with no side effects,
    let the policy choose, take the same samples from every field, and emit the subset, or, with ``batch_size``,
    add it to a pool that emits batches of exactly ``batch_size``.

    ``keep=`` and the run's length are decoded here, once (:meth:`~sbdata.auto.Keep.from_input`).

    Args:
        model: the live ``nn.Module`` being trained (scored in place, never copied).
        loss_fn: per-sample loss, called as ``loss_fn(outputs, targets, reduction='none')``, or a loss module.
        epoch: loader batches per epoch, an int >= 1, as the front end knows it (:class:`~sbdata.SBLoader`: the
            loader's ``len()``); sizes ``keep="auto"``'s trials and counts ``Auto(epochs=...)``. Default None: a
            stream.
        planned: loader batches of the whole run as a trainer integration plans it, an int >= 1; a length the user
            states (``Auto(epochs=...)``, ``Auto(run=...)``, a Schedule's ``total_steps``) stands. Default None: not
            known.
        **options: the keyword options, each with its type, meaning and default in
            :class:`~sbdata.EngineOptions` (``keep``, ``policy``, ``schedule``, ``batch_size``, ``cache``, ...).
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        epoch: int | None = None,
        planned: int | None = None,
        *,
        keep: KeepArg = None,
        policy: PolicyArg = "topk",
        schedule: Schedule | None = None,
        scale_factor: float = 1.0,
        device: torch.device | str | None = None,
        score_mode: ScoreMode = "batch",
        autocast_dtype: torch.dtype | None = None,
        autocast_check_every: int = DEFAULT_CHECK_EVERY,
        score: ScoreName = "loss",
        split: SplitFn | None = None,
        forward: ForwardFn | None = None,
        reduce: ReduceFn | None = None,
        generator: torch.Generator | int | None = None,
        nan_policy: NanPolicy = "raise",
        batch_size: int | None = None,
        drop_last: bool = False,
        return_weights: bool = False,
        id_key: IdKey | None = None,
        cache: LossCache | None = None,
        sync: SyncMode = "local",
        process_group: Any = None,
        lazy_columns: bool = False,
    ) -> None:
        told = getattr(schedule, "total_steps", None)  # the user's Schedule's length stands over a trainer's plan
        self.keep = Keep.from_input(keep, epoch, planned if told is None else told)
        _options.check_engine_options(model, schedule, batch_size, drop_last)
        self.model = model
        self.schedule = schedule if schedule is not None else Schedule()
        self.device = available_device(device) if device is not None else model_device(model)
        self._lockstep = make_lockstep(sync, process_group, self.device)
        self._built_in_job = in_job()
        self.tracker = StatsTracker()
        scorer = Scorer(
            loss_fn,
            forward=forward,
            reduce=reduce,
            score_mode=score_mode,
            scale_factor=scale_factor,
            autocast_dtype=autocast_dtype,
            score=score,
        )
        self.sb_step = SBStep(
            scoring_module(model),
            scorer,
            keep=self.keep.share,
            keep_given=self.keep.given,
            policy=policy,
            device=self.device,
            generator=generator,
            split=split,
            nan_policy=nan_policy,
            return_weights=return_weights,
            id_key=id_key,
            cache=cache,
            sync=sync,
            tracker=self.tracker,
            lockstep=self._lockstep,
            lazy_columns=lazy_columns,
            autocast_check_every=autocast_check_every,
        )
        self.policy: SelectionPolicy = self.sb_step.policy
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.return_weights = self.sb_step.return_weights
        self.emitter = Emitter(batch_size, self.drop_last, self.return_weights, self.device)
        self.pool = self.emitter.pool
        self.controller: AutoController | FixedKeep = FixedKeep()  # the route of keep=: fixed, or by trials
        if self.keep.auto is not None:
            narrowed = repr(self.schedule) if self.schedule.narrows else None
            self.controller = AutoController(self.keep, scoring_module(model), self.device, self._lockstep, narrowed)
        self._passes = Passes()
        self._intake = Intake(
            model, self.device, self.schedule, self.sb_step, self.emitter, self.tracker, self._passes, self.controller
        )

    # ----------------------------------------------------------------- counts
    @property
    def step(self) -> int:
        """Loader batches consumed over all epochs (what the schedule counts; not optimizer steps)."""
        return self._passes.step

    @property
    def epoch_step(self) -> int:
        """Loader batches consumed in the current epoch."""
        return self._passes.epoch_step

    @property
    def epoch(self) -> int:
        """Index of the current epoch, from 0 (epochs are counted by :meth:`start_pass`)."""
        return self._passes.epoch

    @property
    def source_position(self) -> int:
        """Loader batches taken from the current epoch's source: a source restarted from its beginning skips
        these to continue the epoch (a batch whose processing raised is held, and counted here)."""
        return self._passes.source_position

    @property
    def source_ended(self) -> bool:
        """Whether the current epoch's source has run out (anything still held is yielded without asking it)."""
        return self.emitter.source_ended

    @property
    def stats(self) -> SBStats:
        """The running statistics (with ``keep="auto"``, the controller's ``auto_*`` fields too)."""
        snapshot = self.tracker.snapshot()
        return dataclasses.replace(snapshot, **self.controller.stats())

    @property
    def counts(self) -> dict[str, int]:
        """The integer fields of :attr:`stats` (``steps``, ``sb_steps``, ``samples_seen``, ``samples_scored``,
        ``samples_reused``, ``samples_kept``, ``samples_yielded``), free to read every step: unlike :attr:`stats`,
        nothing is summed and nothing synchronises."""
        return self.tracker.counts()

    @property
    def held_samples(self) -> int:
        """Samples held between loader batches: in the pool and in emitted batches not yet handed on."""
        return self.emitter.held_samples

    @property
    def fixed_keep(self) -> float | None:
        """The share every SB step keeps, or None with ``keep="auto"`` (the controller chooses it as it goes)."""
        return None if self.keep.auto is not None else self.keep.share

    @property
    def cache(self) -> LossCache | None:
        """The :class:`~sbdata.LossCache` the SB step reads and ``observe`` writes, or None."""
        return self.sb_step.cache

    @property
    def nan_policy(self) -> str:
        """What the SB step does with non-finite losses: ``"raise"``, ``"drop"`` or ``"keep"``."""
        return self.sb_step.nan_policy

    # ----------------------------------------------------------------- passes
    def _begin_epoch(self) -> None:
        """Start a fresh epoch: reset the in-epoch batch index and drop anything left from an abandoned epoch."""
        self._intake.recheck_device()
        self._passes.begin_epoch()
        self.emitter.clear()
        self.sb_step.settle_cache()  # what the last pass's outputs observed after its end (a pooled rest)
        if self._lockstep is not None:
            self._lockstep.begin_epoch()
        elif not self._built_in_job and joined_late():
            raise RuntimeError(
                "torch.distributed was initialised after this loader was built, so its ranks would not run in "
                "lockstep and could hang: build the loader after init_process_group()"
            )

    @property
    def continues_saved_epoch(self) -> bool:
        """Whether the next :meth:`start_pass` continues a loaded state's epoch (it had not ended)."""
        return self._passes.continues_saved_epoch

    def end_saved_epoch(self) -> None:
        """End a loaded state's epoch without another pass over it (its source was restored at the epoch's end and
        nothing is held): the next :meth:`start_pass` begins the next epoch."""
        self._passes.finish()

    def start_pass(self, source_restored: bool = False) -> bool:
        """Begin a pass over the source; every front end calls this once per pass, after any ``load_state_dict``.

        Without a loaded state, or after one whose pass had ended, this starts a new epoch. After a state whose
        epoch had not ended, the pass continues it: held batches come first, and the front end continues its
        source (restores it, or skips :attr:`source_position` batches of a source that starts over). A front end
        whose source was restored together with the engine (``source_restored``) always continues the saved pass,
        and the source is asked again, so that it can report its own end. A new pass ends every iterator of the
        previous ones (see :meth:`iterate`).

        Returns:
            True when the pass continues the saved epoch, False when it starts a new one.
        """
        continues = self._passes.start_pass(source_restored)
        if not continues:
            self._begin_epoch()
        elif source_restored:
            self.emitter.reopen_source()
        return continues

    # ----------------------------------------------------------------- driving
    def next_output(self, source: Iterator[Any]) -> Any:
        """The next batch to train on, pulling loader batches from ``source`` as needed.

        Raises:
            StopIteration: when ``source`` is exhausted and everything held has been emitted; under
                ``torch.distributed``, when that is so on any rank (see :class:`~sbdata.distributed.Lockstep`).
        """
        flush_deferred_warnings()  # warned in a backward thread: now, at the user's line that asked for a batch
        enter_selection(self)  # another engine's batch on this thread's stack: nested selection, refused
        self.controller.output_requested()  # the training step on the last output ended
        try:
            if self._lockstep is not None:
                return self._lockstep.next_output(self, source)
            if not self._intake.fill(source):
                raise StopIteration
            return self.pop_output()
        except StopIteration:
            self._passes.finish()
            raise
        finally:
            leave_selection()

    def iterate(self, source: Iterator[Any]) -> Iterator[Any]:
        """Generator form of :meth:`next_output` for the current pass (start it with :meth:`start_pass` first).

        Raises:
            RuntimeError: when the generator is advanced after a newer pass started: two live iterators over one
                engine would share it and each lose the other's batches.
        """
        return self._passes.iterate(self.next_output, source)

    def process(self, batch: Any) -> Any:
        """Consume one loader batch and return the one batch it yields (the unpooled path, e.g. a collate_fn).

        Unlike :meth:`next_output`, a batch from which nothing was kept comes back empty rather than skipped.
        """
        flush_deferred_warnings()
        if self.pool is not None:
            raise ValueError("process() yields one batch per loader batch; it cannot serve the pooled batch_size= path")
        enter_selection(self)
        try:
            self.controller.output_requested()
            self.push(batch, emit_empty=True)
            return self.pop_output()
        finally:
            leave_selection()

    # ----------------------------------------------------------------- the driver protocol
    def push(self, batch: Any, emit_empty: bool = False, active: bool | None = None) -> None:
        """Consume one loader batch; whatever it completes is queued for :meth:`pop_output`.

        In the unpooled path a batch from which nothing was kept emits nothing, unless ``emit_empty``. ``active``
        overrides the schedule's decision (the lockstep passes the one all ranks agreed on); None asks it. The
        batch is counted (steps and statistics) only once it has been processed: if scoring raises, it is not.
        """
        self._intake.push(batch, emit_empty, active)

    def selects_next(self) -> bool:
        """Whether the schedule selects on the next loader batch (the lockstep's ranks agree on it first)."""
        return self.schedule.is_active(self._passes.step, self._passes.epoch_step)

    @property
    def same_count_everywhere(self) -> bool:
        """Whether every rank provably queues the same number of outputs for batches of one size: a fixed-count
        policy and no ``nan_policy="drop"`` (the lockstep then skips a reduction)."""
        return bool(self.policy.fixed_count) and self.nan_policy != "drop"

    @property
    def pooled(self) -> bool:
        """Whether outputs are cut to exactly ``batch_size`` samples by a pool."""
        return self.pool is not None

    @property
    def outputs_ready(self) -> int:
        """Outputs queued and not yet handed on."""
        return len(self.emitter)

    def pop_output(self) -> Any:
        """Hand on the oldest queued output (counted in ``stats.samples_yielded`` now)."""
        out, size = self.emitter.pop()
        self.tracker.yielded(size)
        self.controller.output_handed(size)
        return out

    def end_source(self) -> None:
        """The epoch's source ran out: queue the pool's short rest (unless ``drop_last``)."""
        self._intake.end_source()

    def discard_outputs_beyond(self, count: int) -> None:
        """Drop the newest queued outputs until ``count`` remain (outputs another rank cannot match)."""
        self.emitter.discard_beyond(count)

    def observe(self, batch: Any, losses: torch.Tensor) -> None:
        """Take the per-sample losses the training step computed for a yielded ``batch``.

        ``losses`` is ``(B,)`` (e.g. ``F.cross_entropy(model(x), y, reduction="none")``); it is detached and kept on
        the device, so nothing synchronises. With a cache they are recorded into it: samples so observed need no
        rescoring while fresh. With ``score_mode="eval"``, on the first 3 observed batches of a model with
        BatchNorm-like running statistics, the batch is also scored and compared with them (one scoring pass each,
        read once it lands), and sbdata warns once, naming the default ``score_mode="batch"``, when the scoring
        losses average more than 3 times the training losses.
        """
        self.sb_step.observe(batch, losses, self._intake.cache_time())

    # ----------------------------------------------------------------- state
    def fingerprint(self) -> dict[str, Any]:
        """The options a saved state depends on (saved under ``"options"``): :meth:`load_state_dict` refuses a state
        saved with others. Not the options themselves: see :class:`~sbdata.EngineOptions`."""
        return _options.fingerprint(
            self.policy,
            self.cache,
            self.batch_size,
            self.return_weights,
            self.sb_step.score_name,
            self.keep.auto,
            self.sb_step.lazy_columns,
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: step counts, generator, policy, pool, queued outputs and stats.

        Loads with ``torch.load(..., weights_only=True)``: held batches are encoded (numpy fields included).
        """
        return {
            "options": self.fingerprint(),
            **self._passes.state_dict(),
            **self.sb_step.state_dict(),
            "emitter": self.emitter.state_dict(),
            "stats": self.tracker.state_dict(),
            "lockstep": None if self._lockstep is None else self._lockstep.state_dict(),
            "auto": self.controller.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state; the next :meth:`start_pass` continues its epoch if that had not ended.

        Raises:
            ValueError: if the state was saved with other options (policy, history size, cache layout,
                ``batch_size``, ``return_weights``, ``score``, ``keep="auto"`` and its settings), naming the one that
                differs.
        """
        _options.check_fingerprint(state.get("options"), self.fingerprint())
        self._intake.recheck_device()
        self.sb_step.load_state_dict(state)
        self.emitter.load_state_dict(state["emitter"])
        self.tracker.load_state_dict(state["stats"])
        if self._lockstep is not None and state.get("lockstep") is not None:
            self._lockstep.load_state_dict(state["lockstep"])
        self.controller.load_state_dict(state["auto"])  # the fingerprint says it was saved with the same keep= mode
        self._passes.load_state_dict(state)  # last: marks the state as loaded
