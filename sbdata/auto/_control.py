"""The route of ``keep=`` through the engine, the one seam between the engine and judging whether selection pays:
:class:`FixedKeep` for a fixed share, :class:`AutoController` for ``keep="auto"`` (trials and decisions on the live
run; see ``sbdata.auto``). The engine calls the same methods of either."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from sbdata._util import warn_from_user_code
from sbdata.auto._gain import CostTable, score_share, score_sums, shrink_speedup, tau_from_sums
from sbdata.auto._meter import CostMeter, FixedCosts
from sbdata.auto._settings import Keep
from sbdata.auto._trials import fit_progress, shortfall, trial_order, verdict
from sbdata.batch import HostCopy
from sbdata.policies import keep_count

__all__ = ["AutoController", "FixedKeep"]

SUMS = 7  # per measured part: quality sum and count; the SB steps' score sum, sum of squares, count; SB steps;
# quality sum of squares (the level's standard error, for the early stop)
LEVEL = (0, 1, 6)  # the positions of a measured part's quality sum, count and sum of squares


class Route(NamedTuple):
    """The controller's answer for one loader batch the schedule selects on: which way the batch goes (selected, or
    yielded whole), at which share, and whether it is measured first. (Names: a *trial* is the controller's run of
    alternating windows of whole batches and selection on the live run, ending in a *verdict*; an *arm* is one way of
    training inside it: 0 whole batches, ``a`` the ``a``-th share of ``Auto.keeps``. ``advise``'s branches are
    another thing: copies of the model trained apart from the run.)

    Attributes:
        select: run the SB step on it (else it is yielded whole).
        keep: the share to keep when selecting, in (0, 1); None: the SB step's own (a fixed ``keep=``).
        measure: measure the model's quality on it before it is trained on (a trial window's measured part).
    """

    select: bool
    keep: float | None
    measure: bool = False


class FixedKeep:
    """The route of a fixed ``keep=``: every batch the schedule selects on is selected at the SB step's own share;
    nothing is timed, measured or saved (the events of :class:`AutoController` are no-ops here)."""

    def route(self, step: int, n: int) -> Route:
        return Route(True, None)

    def count(self, selected: bool, n: int) -> None:
        pass

    def add(self, scores: torch.Tensor) -> None:
        pass

    def measure(self, split: Callable[[Any], Any], quality: Callable[..., torch.Tensor], batch: Any, n: int) -> int:
        return 0

    def output_requested(self) -> None:
        pass

    def output_handed(self, size: int) -> None:
        pass

    def scoring_started(self) -> None:
        pass

    def scoring_ended(self, n: int) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state: Any) -> None:
        pass


def quality_sums(quality: torch.Tensor) -> torch.Tensor:
    """``[sum q, count, 0, 0, 0, 0, sum q^2]`` over a batch's finite qualities, float64 on their device (no
    synchronisation)."""
    q = quality.detach().to(torch.float64)
    finite = torch.isfinite(q)
    kept = torch.where(finite, q, 0.0)
    head = torch.stack([kept.sum(), finite.sum(dtype=torch.float64)])
    return torch.cat([head, head.new_zeros(SUMS - 3), (kept * kept).sum().reshape(1)])


def step_sums(scores: torch.Tensor) -> torch.Tensor:
    """``[0, 0, sum s, sum s^2, count, 1, 0]`` of an SB step's finite scores (for ``tau``; no synchronisation)."""
    sums = score_sums(scores).to(torch.float64)
    return torch.cat([sums.new_zeros(2), sums, sums.new_ones(1), sums.new_zeros(1)])


class AutoController:
    """Decides, for a :class:`~sbdata.SelectionEngine`, whether and how much to select, by trials on the live run.

    The routed loader batches (those the schedule selects on) are counted. A trial starts ``warmup`` of them into
    training, and ``every`` after each decision. Its windows of ``settle + window`` batches follow
    :func:`trial_order`. Over the last ``window`` batches of each, a copy of the model (the *shadow*,
    made once) accumulates the running average of the live parameters after each step; during the next ``settle``
    batches that average is measured on each arriving batch before it is trained on, into device sums copied to the
    host as the part ends. ``window`` batches after the last one (the copies have landed by then), the controller
    fits each arm's progress and decides. Without the run's length (``Auto.run`` None once sized) no trial starts:
    every batch goes whole, and a warning at the user's line says once how to state the length.

    Args:
        keep: the decoded ``keep=`` (:class:`~sbdata.auto.Keep`) whose ``auto`` holds the sized settings.
        model: the module the scoring pass calls (its parameters are averaged into the shadow; never written).
        device: the scoring device.
        lockstep: the engine's coordinator under ``torch.distributed``, or None.
        narrowed: the engine's schedule, written as the user wrote it, where it selects on only some batches (a
            window, interrupt batches): trials run on those alone (said once). None where it selects on every batch.
    """

    def __init__(
        self, keep: Keep, model: nn.Module, device: torch.device, lockstep: Any, narrowed: str | None = None
    ) -> None:
        settings = keep.auto
        window, settle, warmup, every = (
            (None,) * 4 if settings is None else (settings.window, settings.settle, settings.warmup, settings.every)
        )
        if settings is None or window is None or settle is None or warmup is None or every is None:
            raise ValueError(f"AutoController needs keep='auto' decoded and sized by Keep.from_input, got {keep!r}")
        self.settings, self.model, self.device = settings, model, device
        self.window, self.settle, self.warmup, self.every = window, settle, warmup, every
        self.lockstep = lockstep
        self.told = settings.run is not None  # without the run's length: no trial, whole batches
        live = settings.costs is None and self.told
        self.meter = CostMeter(device, settings.clock) if live else FixedCosts(settings.costs)
        self.keeps = tuple(sorted(settings.keeps))  # arm a keeps keeps[a - 1], smallest first
        self.order = trial_order(len(self.keeps), settings.cycles)
        self.on = False
        self.keep = keep.share  # the share while on (the largest trialled); reported as 1.0 while off
        self.tau = self.speedup = self.score_share = self.predicted = math.nan
        self.routed = 0  # loader batches routed so far
        self.largest = 0  # the largest routed loader batch, in samples (min_kept is checked against it)
        self.trial_start = self.warmup  # routed index where the next (or current) trial starts
        self.shadow: nn.Module | None = None  # the averaged parameters of the window last measured
        self.averaged = 0  # parameter states in the shadow's running average
        self.sums = torch.zeros(SUMS, dtype=torch.float64, device=device)  # the part being measured
        self.copies: list[HostCopy] = []  # the trial's measured windows' sums, on their way to the host
        self.trials = 0
        self.streak = 0  # consecutive trials with the same verdict: the next one waits every * 2 ** streak
        self.on_steps = self.off_steps = self.trial_steps = 0
        self.decisions: list[list[float]] = []  # [step, on, keep, tau, speedup] per decision
        self.reason = ""
        self.warned = False
        if not self.told:
            self.reason = (
                "the run's length is not known, so auto runs no trial and trains on whole batches, as you wrote: pass "
                "keep=Auto(epochs=N) here (N: the epochs you train; Auto(run=N) in loader batches) to let it measure "
                "whether selection pays"
            )
            self.warned = True
            warn_from_user_code(f"sbdata keep='auto': {self.reason}")
        elif narrowed is not None:
            warn_from_user_code(
                f"sbdata keep='auto' under {narrowed} trials and selects only on the batches the schedule selects "
                "on (inside its window, not on its interrupt batches); to let auto decide over the whole run, drop "
                "the Schedule and pass keep=Auto(epochs=N)"
            )

    # ----------------------------------------------------------------- the live cost meter's events
    def output_requested(self) -> None:
        """The training loop asked for its next batch: the training step on the last one ended (live meter)."""
        self.meter.requested()

    def output_handed(self, size: int) -> None:
        """An output batch of ``size`` samples was handed to the training loop (live meter)."""
        self.meter.handed(size)

    def scoring_started(self) -> None:
        """An SB step's scoring pass begins (live meter)."""
        self.meter.begin_score()

    def scoring_ended(self, n: int) -> None:
        """An SB step's scoring pass on ``n`` samples ended (live meter)."""
        self.meter.end_score(n)

    # ----------------------------------------------------------------- per loader batch
    def _span(self) -> int:
        return self.settle + self.window

    def _window(self, position: int) -> int:
        """The trial window of routed batch ``position`` (< 0: before the trial; >= len(order): after it)."""
        return (position - self.trial_start) // self._span()

    def route(self, step: int, n: int) -> Route:
        """What to do with a loader batch of ``n`` samples the schedule selects on; averages, ends a measurement,
        or decides first (the live model is as the steps on the batches before left it)."""
        position = self.routed
        self.routed += 1
        if not self.told:
            return Route(False, self.keep)
        self.largest = max(self.largest, n)
        if position == self.trial_start:
            few = self._too_few()
            if few:
                self._skip(step, few)
            elif self._too_dear(step):
                self._skip_dear(step)
        self._stop_if_harmful(position, step)
        windows, span = len(self.order), self._span()
        relative = position - self.trial_start
        window, offset = relative // span, relative % span
        if 0 <= window <= windows and relative >= span and offset == self.settle:
            self.copies.append(HostCopy(self.sums))  # window - 1's average, measured over this window's settling
            self.sums = torch.zeros(SUMS, dtype=torch.float64, device=self.device)
        if 0 <= window < windows and offset >= self.settle:
            self._average(offset == self.settle)
        elif 0 < window <= windows and offset == 0:
            self._freeze()  # window - 1's average is complete: its buffers are the live ones now
        if relative == windows * span + self.settle + self.window:
            self._decide(step)
        measure = 0 < window <= windows and offset < self.settle
        if 0 <= window < windows:
            arm = self.order[window]
            if arm > 0:
                return Route(True, self.keeps[arm - 1], measure)
            return Route(False, self.keep, measure)
        return Route(self.on, self.keep, measure)

    def _shadow(self) -> nn.Module:
        """The shadow, made on first use: a copy of the model, gradients off."""
        if self.shadow is None:
            try:
                self.shadow = copy.deepcopy(self.model)
            except Exception as error:  # a module holding something copy cannot copy (a lock, a file, a C handle)
                raise RuntimeError(
                    f"keep='auto' averages the model's parameters in a copy of it for its trials, and "
                    f"copy.deepcopy({type(self.model).__name__}) failed: {error}. Make the model deep-copyable, or "
                    "pass a fixed keep= (e.g. keep=0.5)"
                ) from error
            self.shadow.requires_grad_(False)
        return self.shadow

    def _average(self, first: bool) -> None:
        """Add the live parameters to the shadow's running average (start it anew with ``first``)."""
        shadow = self._shadow()
        self.averaged = 1 if first else self.averaged + 1
        with torch.no_grad():
            live = [p.detach() for p in self.model.parameters()]
            torch._foreach_lerp_(list(shadow.parameters()), live, 1.0 / self.averaged)

    def _freeze(self) -> None:
        if self.shadow is None:
            return
        with torch.no_grad():
            for mine, theirs in zip(self.shadow.buffers(), self.model.buffers(), strict=True):
                mine.copy_(theirs)

    def in_trial(self) -> bool:
        """Whether the last routed batch belonged to a trial window."""
        return 0 <= self._window(self.routed - 1) < len(self.order)

    def count(self, selected: bool, n: int) -> None:
        """The routed batch was processed (``selected``, or yielded whole)."""
        if self.in_trial():
            self.trial_steps += 1
        elif selected:
            self.on_steps += 1
        else:
            self.off_steps += 1

    def add(self, scores: torch.Tensor) -> None:
        """Add a trial SB step's scores to the device sums (for ``tau``; no synchronisation)."""
        if self.in_trial():
            self.sums = self.sums + step_sums(scores).to(self.sums.device)

    def measure(self, split: Callable[[Any], Any], quality: Callable[..., torch.Tensor], batch: Any, n: int) -> int:
        """Measure the shadow (the last window's averaged parameters) on a batch before it is trained on (timed as
        a scoring pass, measuring live); returns the samples measured."""
        if self.shadow is None:
            return 0
        inputs, targets = split(batch)
        self.meter.begin_score()
        self.sums = self.sums + quality_sums(quality(self.shadow, inputs, targets, n)).to(self.sums.device)
        self.meter.end_score(n)
        return n

    # ----------------------------------------------------------------- trials and decisions
    def _decide(self, step: int) -> None:
        """Fit the trial whose copies have landed, decide, and schedule the next trial."""
        settings = self.settings
        rows = [copy.value().tolist() for copy in self.copies]  # the last one issued a window ago: landed
        self.copies, self.averaged = [], 0
        self.trials += 1
        self.trial_start = self.routed - 1 + self.every  # rescheduled below once the verdict is known
        costs = self.meter.table()
        known = costs is not None
        params = [0.0] * 5 if costs is None else [costs.score_per_sample, costs.train_per_sample,
                                                  costs.score_fixed, costs.train_fixed, costs.overhead]  # fmt: skip
        windows = len(self.order)
        rows = (rows + [[0.0] * SUMS] * windows)[:windows]
        values = [v for row in rows for v in row] + [float(known), *params]
        if self.lockstep is not None:
            values = self.lockstep.reduce_sum(values)  # every rank decides from the same numbers
        world = 1 if self.lockstep is None else self.lockstep.world
        sums = [values[SUMS * j : SUMS * (j + 1)] for j in range(windows)]
        total, squares, count, steps = (sum(row[i] for row in sums) for i in range(2, 6))
        tail = values[SUMS * windows :]
        if tail[0] < world or any(row[1] <= 0 for row in sums) or steps <= 0:  # no verdict: the last one stands
            standing = f"Selection stays on at keep {self.keep:g}" if self.on else "Training stays on whole batches"
            self._record(step, f"Could not decide: a trial window measured nothing (no finite quality) or no step "
                               f"was timed yet. {standing}. {self._next(step, self.every, 'trial')}")  # fmt: skip
            return
        costs = CostTable(*(v / world for v in tail[1:]))
        self.tau = tau_from_sums(total, squares, count)
        batch = max(1, round(count / steps))  # samples per SB step
        levels = [row[0] / row[1] for row in sums]
        # the average holds the states after settle .. span - 1 of the window's steps: its time in windows
        middle = (self.settle + (self.window - 1) / 2) / self._span()
        keeps = self.keeps
        per_batch = [costs.train(batch)] + [costs.sb_step(batch, keep_count(k, batch)).seconds for k in keeps]
        incumbent = keeps.index(self.keep) + 1 if self.on else 0
        result = verdict(fit_progress(levels, self.order, len(keeps), middle), per_batch, keeps, z=settings.z,
                         margin=settings.margin, incumbent=incumbent)  # fmt: skip
        gap = self._settle_on(result.arm > 0)
        chosen = result.arm - 1 if self.on else max(range(len(keeps)), key=lambda i: result.contrasts[i])
        self.keep = keeps[chosen]
        self.speedup = result.speedups[chosen]
        self.score_share = score_share(self.keep, batch, costs)
        self.predicted = shrink_speedup(self.tau, self.keep, batch, costs)
        self._record(step, f"{result.reason}. The spread of the losses alone had predicted {self.predicted:.2f}x at "
                           f"keep {self.keep:g} (tau {self.tau:.2f}). {self._next(step, gap, 'trial')}")  # fmt: skip

    def _settle_on(self, on: bool) -> int:
        """Take the verdict ``on`` and schedule the next trial; returns its wait in loader batches. Each verdict
        that repeats the last doubles the wait: trials cost seconds where selection pays (their plain windows) and
        quality where it hurts (their selection windows), so their total stays a logarithmic share of a long run; a
        changed verdict is re-checked after ``2 every``."""
        self.streak = self.streak + 1 if on == self.on else 1
        self.on = on
        gap = self.every * 2**self.streak
        self.trial_start = self.routed - 1 + gap
        return gap

    def _too_few(self) -> int:
        """The ranks (1 without ``torch.distributed``) where the smallest share keeps fewer than ``min_kept`` samples
        of the largest batch (one ``all_reduce`` per trial under ``torch.distributed``, so that every rank skips
        alike)."""
        few = float(keep_count(self.keeps[0], self.largest) < self.settings.min_kept)
        return round(self.lockstep.reduce_sum([few])[0]) if self.lockstep is not None else int(few)

    def _skip(self, step: int, few: int) -> None:
        """Decide for whole batches without a trial: the smallest share keeps fewer than ``min_kept`` samples (on
        ``few`` ranks)."""
        gap = self._settle_on(False)
        kept, keep, least = keep_count(self.keeps[0], self.largest), self.keeps[0], self.settings.min_kept
        if self.lockstep is None:
            what = f"keep {keep:g} keeps {kept} sample(s) of {self.largest} per batch, fewer than min_kept={least}"
        else:
            what = (f"keep {keep:g} keeps fewer than min_kept={least} samples per batch on {few} of "
                    f"{self.lockstep.world} ranks (here {kept} of {self.largest})")  # fmt: skip
        self._record(step, f"Whole batches, no trial: {what}. A step on so few samples is noise, and breaks "
                           f"BatchNorm. Pass Auto(keeps=...) with larger shares, or a larger batch. "
                           f"{self._next(step, gap, 'check')}", trial=False)  # fmt: skip

    # ----------------------------------------------------------------- the bound on a trial's harm
    def _selection_batches(self) -> int:
        """Loader batches of a trial's selection windows."""
        return self._span() * sum(1 for arm in self.order if arm)

    def _too_dear(self, step: int) -> bool:
        """Whether a trial starting at loader batch ``step`` would take more than ``trial_share`` of the known run's
        batches left (False where the run's length is not known). The same on every rank: no communication."""
        run = self.settings.run
        return run is not None and self._selection_batches() > self.settings.trial_share * (run - step)

    def _skip_dear(self, step: int) -> None:
        """Decide for whole batches without a trial: the run left is too short for its selection windows."""
        gap = self._settle_on(False)
        run, share, dear = self.settings.run, self.settings.trial_share, self._selection_batches()
        assert run is not None  # _too_dear: a known length
        more = "Pass Auto(trial_share=...) to allow more. " if dear < run - step else ""  # a larger share could fit
        self._record(step, f"Whole batches, no trial: a trial's selection windows ({dear} loader batches) would take "
                           f"more than trial_share={share:g} of the {run - step} batches left in this run of {run}. "
                           "Where selection hurts, the batches after a trial must repair what its selection windows "
                           f"did, and these are too few. {more}{self._next(step, gap, 'check')}",
                     trial=False)  # fmt: skip

    def _stop_if_harmful(self, position: int, step: int) -> None:
        """At routed batch ``position``, while selection is off (a trial's selection windows are then extra harm
        against what the run does; while it is on they are what it does, and the exit test decides): where a
        selection window's measurement landed (``window`` batches after it was made: no wait), stop the trial for
        whole batches if its level fell ``stop_z`` standard errors below the last whole-batch window's
        (:func:`shortfall`). One ``all_reduce`` of six numbers per
        selection window under ``torch.distributed``, so that every rank stops alike."""
        if self.on:  # selection is what the run does between trials: the exit test's verdict decides
            return
        span, relative = self._span(), position - self.trial_start
        measured = relative // span - 2  # the window whose measurement was made a window ago
        if relative <= 0 or relative % span or not 0 <= measured < len(self.order) or not self.order[measured]:
            return
        plain = [i for i in range(measured) if self.order[i] == 0]
        if not plain or len(self.copies) <= measured:
            return
        rows = [self.copies[measured].value().tolist(), self.copies[plain[-1]].value().tolist()]
        values = [float(row[i]) for row in rows for i in LEVEL]
        if self.lockstep is not None:
            values = self.lockstep.reduce_sum(values)
        errors = shortfall(values[:3], values[3:])
        if errors < -self.settings.stop_z:  # NaN compares False: no stop
            self._stop(step, measured, errors)

    def _stop(self, step: int, measured: int, errors: float) -> None:
        """End the trial now for whole batches: window ``measured`` lost ground against whole batches. The next
        trial comes when it would have after this trial's verdict for whole batches (stopping changes what the
        trial's last windows train on, not when the run is trialled again: an earlier re-trial would land later
        in the run, where fewer batches are left to repair it)."""
        self.copies, self.averaged = [], 0
        self.sums = torch.zeros(SUMS, dtype=torch.float64, device=self.device)
        self.trials += 1
        keep = self.keeps[self.order[measured] - 1]
        verdict_at = self.trial_start + len(self.order) * self._span() + self.settle + self.window
        self.trial_start = verdict_at + self._settle_on(False)
        wait = self.trial_start - (self.routed - 1)
        self._record(step, f"Decided: train on whole batches, without finishing the trial: in window {measured + 1} "
                           f"of {len(self.order)}, the model trained keeping {keep:g} of each batch measured "
                           f"{-errors:.1f} standard errors below whole batches' last window, past the limit of "
                           f"stop_z={self.settings.stop_z:g}, so the trial stopped there to bound its harm. "
                           f"{self._next(step, wait, 'trial')}")  # fmt: skip

    def _next(self, step: int, gap: int, what: str) -> str:
        """``Next {what} in {gap} batches`` after loader batch ``step``, or, where the run ends first, that none is
        left (no message points past the run's end)."""
        run = self.settings.run
        if run is not None and step + gap >= run:
            return f"No {what} is left in this run ({run - step} batches left)"
        return f"Next {what} in {gap} batches"

    def _record(self, step: int, reason: str, trial: bool = True) -> None:
        decision = [float(step), float(self.on), self.keep, self.tau, self.speedup]
        self.decisions = [*self.decisions, decision][-self.settings.decisions_kept :]
        self.reason = f"{self._compared()}. {reason}" if trial else reason
        if not self.on and not self.warned:
            self.warned = True
            latest = "said once; loader.stats.auto_reason has the latest"
            warn_from_user_code(f"sbdata keep='auto': {self.reason} ({latest})")

    def _compared(self) -> str:
        """What a trial compares, in words: ``Trial n compared whole batches with keeping k of each batch ...``."""
        shares = " and ".join(f"{k:g}" for k in self.keeps)
        return (
            f"Trial {self.trials} compared whole batches with keeping {shares} of each batch, in alternating "
            f"windows of {self._span()} loader batches"
        )

    # ----------------------------------------------------------------- stats and state
    def stats(self) -> dict[str, Any]:
        """The ``auto_*`` fields of :class:`~sbdata.SBStats`."""
        routed = self.on_steps + self.off_steps + self.trial_steps
        return {
            "auto_on": self.on,
            "auto_on_share": self.on_steps / routed if routed else math.nan,
            "auto_keep": self.keep if self.on else 1.0,
            "auto_tau": self.tau,
            "auto_score_share": self.score_share,
            "auto_speedup": self.speedup,
            "auto_decisions": tuple(tuple(d) for d in self.decisions),
            "auto_reason": self.reason,
            "auto_trials": self.trials,
            "auto_trial_share": self.trial_steps / routed if routed else math.nan,
        }

    def state_dict(self) -> dict[str, Any]:
        windows = [torch.as_tensor(copy.value()).clone() for copy in self.copies]
        self.copies = [HostCopy(w.to(self.device)) for w in windows]
        return {
            "on": self.on, "keep": self.keep, "tau": self.tau, "speedup": self.speedup,
            "score_share": self.score_share, "predicted": self.predicted,
            "routed": self.routed, "largest": self.largest, "trial_start": self.trial_start, "trials": self.trials,
            "streak": self.streak,
            "sums": self.sums.clone(), "windows": windows,
            "shadow": None if self.shadow is None else {k: v.clone() for k, v in self.shadow.state_dict().items()},
            "averaged": self.averaged,
            "counts": [self.on_steps, self.off_steps, self.trial_steps],
            "decisions": [list(d) for d in self.decisions],
            "reason": self.reason, "warned": self.warned,
            "meter": self.meter.state_dict(),
        }  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.on, self.keep = bool(state["on"]), float(state["keep"])
        self.tau, self.speedup = float(state["tau"]), float(state["speedup"])
        self.score_share, self.predicted = float(state["score_share"]), float(state["predicted"])
        self.routed, self.trial_start = int(state["routed"]), int(state["trial_start"])
        self.largest = int(state["largest"])
        self.trials, self.streak = int(state["trials"]), int(state["streak"])
        self.sums = state["sums"].to(self.device, torch.float64).clone()
        self.copies = [HostCopy(w.to(self.device, torch.float64)) for w in state["windows"]]
        self.averaged = int(state["averaged"])
        if state["shadow"] is not None:
            self._shadow().load_state_dict(state["shadow"])
        self.on_steps, self.off_steps, self.trial_steps = (int(v) for v in state["counts"])
        self.decisions = [[float(v) for v in d] for d in state["decisions"]]
        self.reason, self.warned = str(state["reason"]), bool(state["warned"])
        if state["meter"] is not None:
            self.meter.load_state_dict(state["meter"])
