"""``keep="auto"``: select only while the online gain estimate says it pays (``docs/method_card.md``, "Does
selection pay?").

:class:`Auto` holds the settings; :class:`AutoController` is the engine's part that decides. Per routed loader batch
it only checks counters; every ``every`` scored steps (SB steps, and probes while off) it reads the device sums of
the scores (:func:`~sbdata.gain.score_sums`) of the window before, smooths ``tau``, predicts the speed-up of the
best share (:func:`~sbdata.gain.best_keep`) from the cost table, and decides with hysteresis: on above
``1 + margin``, off below 1. The read is of a :class:`~sbdata._hostcopy.HostCopy` issued one window earlier, so it
never waits for the device; under ``torch.distributed`` one ``all_reduce`` makes every rank decide alike.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._hostcopy import HostCopy
from ._meter import CostMeter
from .gain import CostTable, best_keep, score_share, score_sums, tau_from_sums

__all__ = ["Auto", "AutoController"]


@dataclass(frozen=True)
class Auto:
    """Settings of ``keep="auto"`` (``"auto"`` is ``Auto()``).

    Selection starts off. The first read, after ``every`` scored steps, only starts the window's copy to the host;
    the first decision comes at the second read, from that window (with the defaults, after 32 probes: 256 loader
    batches). From then on, one decision per ``every`` scored steps.

    Attributes:
        min_keep / max_keep: the range of shares selection may keep, 0 < min_keep <= max_keep <= 1.
            Defaults 0.1, 0.9.
        margin: selection turns on when the predicted speed-up exceeds ``1 + margin``, and off below 1, >= 0.
            Default 0.05.
        every: scored steps (SB steps, or probes while off) per read and decision, an int >= 1. Default 16.
        probe_every: while off, every ``probe_every``-th loader batch is scored (and still yielded whole), an int
            >= 1. Default 8.
        grid: step of the grid of shares tried, in (0, 1]. Default 0.05.
        smoothing: EMA factor of ``tau`` per read, in [0, 1). Default 0.9.
        costs: a fixed :class:`~sbdata.gain.CostTable` (tests; or a calibrated one); None measures live.
        clock: seconds for the live measurement; None uses ``time.thread_time`` on the CPU, CUDA events for the
            scoring pass on CUDA. Ignored with ``costs``.
        history: decisions kept in ``stats.auto_history``, an int >= 1. Default 32.
    """

    min_keep: float = 0.1
    max_keep: float = 0.9
    margin: float = 0.05
    every: int = 16
    probe_every: int = 8
    grid: float = 0.05
    smoothing: float = 0.9
    costs: CostTable | None = None
    clock: Callable[[], float] | None = None
    history: int = 32

    def __post_init__(self) -> None:
        for name, fix in (
            ("min_keep", "a share in (0, 1], e.g. 0.1"),
            ("max_keep", "a share in (0, 1], e.g. 0.9"),
            ("grid", "a step in (0, 1], e.g. 0.05"),
        ):
            _check_number(name, getattr(self, name), _is_share, fix)
        _check_number("margin", self.margin, lambda v: 0 <= v < math.inf, "a finite number >= 0, e.g. 0.05")
        _check_number("smoothing", self.smoothing, lambda v: 0 <= v < 1, "a factor in [0, 1), e.g. 0.9")
        if self.min_keep > self.max_keep:
            raise ValueError(
                f"Auto(min_keep={self.min_keep}, max_keep={self.max_keep}): min_keep must not exceed max_keep; "
                "swap them or widen the range"
            )
        for name in ("every", "probe_every", "history"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Auto.{name} must be an int >= 1, got {value!r}: pass e.g. {name}=16")
        if self.costs is not None and not isinstance(self.costs, CostTable):
            raise TypeError(f"Auto.costs must be a sbdata.gain.CostTable or None, got {type(self.costs).__name__}")
        if self.clock is not None and not callable(self.clock):
            raise TypeError(f"Auto.clock must be callable() -> seconds or None, got {type(self.clock).__name__}")

    def describe(self) -> str:
        """The settings a saved state depends on, for the options fingerprint."""
        return (
            f"auto(min_keep={self.min_keep}, max_keep={self.max_keep}, margin={self.margin}, every={self.every}, "
            f"probe_every={self.probe_every}, grid={self.grid}, smoothing={self.smoothing})"
        )


def _is_share(value: float) -> bool:
    return 0 < value <= 1


def _check_number(name: str, value: Any, ok: Callable[[float], bool], fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
        raise ValueError(f"Auto.{name} got {value!r}: pass {fix}")


def as_auto(keep: Any) -> Auto | None:
    """The :class:`Auto` settings that ``keep=`` asks for, or None for a fixed share."""
    if isinstance(keep, Auto):
        return keep
    return Auto() if isinstance(keep, str) and keep == "auto" else None


class AutoController:
    """Decides, for a :class:`~sbdata.SelectionEngine`, whether and how much to select.

    Args:
        settings: the :class:`Auto` settings.
        sb_step: the engine's SB step, whose ``keep`` the controller sets.
        device: the scoring device (where the score sums accumulate).
        batch_size: the pooled output batch size, or None (shrink layout).
        tracker: the engine's statistics (the cache's reused share is read from its host counters).
        lockstep: the engine's coordinator under ``torch.distributed``, or None.
    """

    def __init__(self, settings: Auto, sb_step: Any, device: torch.device, batch_size: int | None,
                 tracker: Any, lockstep: Any) -> None:  # fmt: skip
        self.settings, self.sb_step, self.device = settings, sb_step, device
        self.batch_size, self.tracker, self.lockstep = batch_size, tracker, lockstep
        self.meter = None if settings.costs is not None else CostMeter(device, settings.clock)
        self.on = False
        self.keep = sb_step.keep = min(max(0.5, settings.min_keep), settings.max_keep)
        self.tau = math.nan
        self.speedup = self.score_share = math.nan
        self.window, self.batches, self.samples = 0, 0, 0  # scored steps, and their batches and samples
        self.sums = torch.zeros(3, dtype=torch.float64, device=device)
        self.in_flight: tuple[HostCopy, int, int] | None = None  # the previous window, on its way to the host
        self.off_count = self.on_steps = self.off_steps = 0
        self.decisions: list[list[float]] = []  # [step, on, keep, tau, speedup] per read
        self.reason = ""
        self.warned = False

    # ----------------------------------------------------------------- per loader batch
    def route(self, step: int) -> tuple[bool, bool]:
        """``(select, probe)`` for a loader batch the schedule selects on; reads first when a window is full."""
        if self.window >= self.settings.every:
            self._read(step)
        if self.on:
            return True, False
        return False, self.off_count % self.settings.probe_every == self.settings.probe_every - 1

    def count(self, selected: bool, scored: bool, n: int) -> None:
        """The routed batch was processed (selected, or plain; ``scored``: selected or probed)."""
        if selected:
            self.on_steps += 1
        else:
            self.off_steps += 1
            self.off_count += 1
        if scored:
            self.window += 1
            self.batches += 1
            self.samples += n

    def add(self, scores: torch.Tensor) -> None:
        """Add a batch's scores to the window's device sums (no synchronisation)."""
        self.sums = self.sums + score_sums(scores).to(self.sums.device)

    def probe(self, split: Callable[[Any], Any], score: Callable[..., torch.Tensor], batch: Any, n: int) -> None:
        """Score a batch that is yielded whole, for the estimate (and time it, measuring live)."""
        if self.meter is not None:
            self.meter.begin_score()
        inputs, targets = split(batch)
        self.add(score(inputs, targets, n))
        if self.meter is not None:
            self.meter.end_score(n)

    def observed(self, losses: torch.Tensor) -> None:
        """Training losses of a yielded batch: while off they are whole batches' losses, so they feed the estimate."""
        if not self.on:
            self.add(losses)

    # ----------------------------------------------------------------- reading and deciding
    def _read(self, step: int) -> None:
        previous = self.in_flight
        self.in_flight = (HostCopy(self.sums), self.batches, self.samples)
        self.sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        self.window = self.batches = self.samples = 0
        if previous is not None:
            copy, batches, samples = previous
            self._decide(step, [*copy.value().tolist(), batches, samples])  # issued a window ago: landed

    def _decide(self, step: int, window: list[float]) -> None:
        costs = self.settings.costs if self.meter is None else self.meter.table()
        reused, scored = self.tracker.samples_reused, self.tracker.samples_scored
        params = [0.0] * 5 if costs is None else [costs.score_per_sample, costs.train_per_sample,
                                                  costs.score_fixed, costs.train_fixed, costs.overhead]  # fmt: skip
        values = [*window, reused, reused + scored, float(costs is not None), *params]
        if self.lockstep is not None:
            values = self.lockstep.reduce_sum(values)  # every rank decides from the same numbers
        total, squares, count, batches, samples, reused_all, seen_all, known = values[:8]
        if batches <= 0:
            return
        window_tau = tau_from_sums(total, squares, count)
        s = self.settings.smoothing
        self.tau = window_tau if math.isnan(self.tau) else s * self.tau + (1 - s) * window_tau
        world = 1 if self.lockstep is None else self.lockstep.world
        if known < world:  # some rank has no timing yet
            return
        costs = CostTable(*(v / world for v in values[8:]))
        batch = max(1, round(samples / batches))
        reuse = reused_all / seen_all if seen_all else 0.0
        keep, self.speedup = best_keep(self.tau, costs, batch, batch_size=self.batch_size,
                                       min_keep=self.settings.min_keep, max_keep=self.settings.max_keep,
                                       step=self.settings.grid, reuse=reuse)  # fmt: skip
        self.score_share = score_share(keep, batch, costs, reuse, self.batch_size)
        if self.on and self.speedup < 1.0:
            self.on = False
        elif not self.on and self.speedup > 1.0 + self.settings.margin:
            self.on = True
        if self.on:
            self.keep = self.sb_step.keep = keep
        decision = [float(step), float(self.on), keep, self.tau, self.speedup]
        self.decisions = [*self.decisions, decision][-self.settings.history :]
        if not self.on:
            spread = "flat" if self.tau < 1.2 else "concentrated"
            self.reason = (
                f"selection predicted {self.speedup:.2f}x here: scoring is {self.score_share:.0%} of a step and the "
                f"loss spread is {spread} (tau {self.tau:.2f}); training on whole batches"
            )
            if not self.warned:
                self.warned = True
                warnings.warn(f"sbdata keep='auto': {self.reason}", stacklevel=2)

    # ----------------------------------------------------------------- stats and state
    def stats(self) -> dict[str, Any]:
        """The ``auto_*`` fields of :class:`~sbdata.SBStats`."""
        routed = self.on_steps + self.off_steps
        return {
            "auto_on": self.on,
            "auto_on_share": self.on_steps / routed if routed else math.nan,
            "auto_keep": self.keep if self.on else 1.0,
            "auto_tau": self.tau,
            "auto_score_share": self.score_share,
            "auto_speedup": self.speedup,
            "auto_history": tuple(tuple(d) for d in self.decisions),
            "auto_reason": self.reason,
        }

    def state_dict(self) -> dict[str, Any]:
        flight = None
        if self.in_flight is not None:
            copy, batches, samples = self.in_flight
            values = torch.as_tensor(copy.value()).clone()
            flight = [values, batches, samples]
            self.in_flight = (HostCopy(values.to(self.device)), batches, samples)
        return {
            "on": self.on, "keep": self.keep, "tau": self.tau, "speedup": self.speedup,
            "score_share": self.score_share, "window": [self.window, self.batches, self.samples],
            "sums": self.sums.clone(), "in_flight": flight,
            "counts": [self.off_count, self.on_steps, self.off_steps], "decisions": [list(d) for d in self.decisions],
            "reason": self.reason, "warned": self.warned,
            "meter": None if self.meter is None else self.meter.state_dict(),
        }  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.on, self.keep = bool(state["on"]), float(state["keep"])
        self.sb_step.keep = self.keep
        self.tau, self.speedup, self.score_share = (
            float(state["tau"]),
            float(state["speedup"]),
            float(state["score_share"]),
        )
        self.window, self.batches, self.samples = (int(v) for v in state["window"])
        self.sums = state["sums"].to(self.device, torch.float64).clone()
        flight = state["in_flight"]
        self.in_flight = (
            None if flight is None else (HostCopy(flight[0].to(self.device)), int(flight[1]), int(flight[2]))
        )
        self.off_count, self.on_steps, self.off_steps = (int(v) for v in state["counts"])
        self.decisions = [[float(v) for v in d] for d in state["decisions"]]
        self.reason, self.warned = str(state["reason"]), bool(state["warned"])
        if self.meter is not None and state["meter"] is not None:
            self.meter.load_state_dict(state["meter"])
