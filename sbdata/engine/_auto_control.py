"""The ``keep="auto"`` controller: routes loader batches, reads the gain estimate, decides (see ``sbdata.auto``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

import sbdata.batch as _batch
from sbdata._util import warn_from_user_code
from sbdata.auto import Auto, CostTable, best_keep, score_share, score_sums, tau_from_sums
from sbdata.batch import HostCopy
from sbdata.engine._cost_meter import CostMeter

__all__ = ["AutoController", "Route"]


class Route(NamedTuple):
    """The controller's answer for one loader batch the schedule selects on.

    Attributes:
        select: run the SB step on it (else it is yielded whole).
        probe: score it anyway, for the estimate (only when not selecting).
        keep: the share to keep when selecting, in (0, 1].
    """

    select: bool
    probe: bool
    keep: float


class AutoController:
    """Decides, for a :class:`~sbdata.SelectionEngine`, whether and how much to select.

    Args:
        settings: the :class:`Auto` settings.
        unbiased: whether selection is unbiased importance sampling (a weighted policy with ``return_weights``),
            which sets the lowest share it may choose (:meth:`Auto.lowest_keep`).
        device: the scoring device (where the score sums accumulate).
        batch_size: the pooled output batch size, or None (shrink layout).
        tracker: the engine's statistics (the cache's reused share is read from its host counters).
        lockstep: the engine's coordinator under ``torch.distributed``, or None.
    """

    def __init__(self, settings: Auto, unbiased: bool, device: torch.device, batch_size: int | None,
                 tracker: Any, lockstep: Any) -> None:  # fmt: skip
        self.settings, self.device = settings, device
        self.batch_size, self.tracker, self.lockstep = batch_size, tracker, lockstep
        self.meter = None if settings.costs is not None else CostMeter(device, settings.clock)
        self.on = False
        self.min_keep = settings.lowest_keep(unbiased=unbiased)
        self.keep = min(max(0.5, self.min_keep), settings.max_keep)
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
    def route(self, step: int) -> Route:
        """What to do with a loader batch the schedule selects on; reads the estimate first when a window is full."""
        if self.window >= (self.settings.every if self.on else self.settings.probes):
            self._read(step)
        if self.on:
            return Route(True, False, self.keep)
        return Route(False, self.off_count % self.settings.probe_every == self.settings.probe_every - 1, self.keep)

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

    def probe(self, split: Callable[[Any], Any], score: Callable[..., torch.Tensor], batch: Any, n: int) -> int:
        """Score a batch that is yielded whole, for the estimate (and time it, measuring live); returns how many
        samples were scored.

        Measuring live, every second probe scores only the batch's first quarter, so that the scoring fit has two
        sizes (its fixed cost per call, which prices training at the kept share, against its cost per sample).
        """
        inputs, targets = split(batch)
        if self.meter is not None and self.off_count // self.settings.probe_every % 2 == 1 and n >= 8:
            quarter = torch.arange(n // 4, device=self.device)
            inputs, targets, n = _batch.select(inputs, quarter), _batch.select(targets, quarter), n // 4
        if self.meter is not None:
            self.meter.begin_score()
        self.add(score(inputs, targets, n))
        if self.meter is not None:
            self.meter.end_score(n)
        return n

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
                                       min_keep=self.min_keep, max_keep=self.settings.max_keep,
                                       step=self.settings.grid, reuse=reuse)  # fmt: skip
        self.score_share = score_share(keep, batch, costs, reuse, self.batch_size)
        if self.on and self.speedup < 1.0:
            self.on = False
        elif not self.on and self.speedup > 1.0 + self.settings.margin:
            self.on = True
        if self.on:
            self.keep = keep
        decision = [float(step), float(self.on), keep, self.tau, self.speedup]
        self.decisions = [*self.decisions, decision][-self.settings.decisions_kept :]
        if not self.on:
            spread = "flat" if self.tau < 1.2 else "concentrated"
            self.reason = (
                f"selection predicted {self.speedup:.2f}x here: scoring is {self.score_share:.0%} of a step and the "
                f"loss spread is {spread} (tau {self.tau:.2f}); training on whole batches"
            )
            if not self.warned:
                self.warned = True
                warn_from_user_code(f"sbdata keep='auto': {self.reason}")

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
            "auto_decisions": tuple(tuple(d) for d in self.decisions),
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
