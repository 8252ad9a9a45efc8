"""Running statistics of a selection engine, cheap to update every step."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

__all__ = ["SBStats"]

LAZY_STEPS = 16  # SB steps whose loss sums are added up in one go
_SHOWN = (  # what print(stats) shows, in this order; the first four always, the rest where they say something
    "steps", "sb_steps", "samples_seen", "samples_kept", "backprop_fraction", "mean_loss_kept", "mean_loss_dropped",
    "scoring_seconds", "samples_reused", "samples_checked", "auto_on", "auto_keep", "auto_trials", "auto_speedup",
    "precision_agreement", "precision_fallback", "score_mode_ratio",
)  # fmt: skip


@dataclass(frozen=True)
class SBStats:
    """A snapshot of what an engine has done since it was built (or since the state it was loaded from).

    Attributes:
        steps: loader batches consumed.
        sb_steps: of those, batches on which selection ran.
        samples_seen: samples in the consumed loader batches.
        samples_scored: samples that went through the scoring forward.
        samples_reused: samples of SB steps whose loss came from the cache instead of a forward.
        samples_kept: samples selection kept on SB steps.
        samples_yielded: samples handed to the training loop (plain batches whole, plus kept samples emitted).
        mean_loss_kept: mean scoring loss of the kept samples with a finite loss (nan before there is one).
        mean_loss_dropped: mean scoring loss of the dropped samples with a finite loss (nan before there is one).
            Non-finite losses (kept as the hardest under ``nan_policy="keep"``) are left out of both means and their
            counts, so one NaN does not make the means NaN for the rest of the run.
        scoring_seconds: host wall-clock seconds spent in scoring and selection. On an accelerator this is launch
            time, not device time, since no synchronisation is forced.
        auto_on: with ``keep="auto"``, whether selection is on now (False otherwise).
        auto_on_share: share of the loader batches the schedule selects on that were selected (nan without auto).
        auto_keep: the share kept now (1.0 while off; nan without auto).
        auto_tau: the variance-reduction factor of the last trial's scores (nan before a decision).
        auto_score_share: the scoring pass's share of an SB step's seconds at the chosen share (nan before a
            decision).
        auto_speedup: the last trial's measured speed-up (progress per second against whole batches) of the
            chosen share, or of the best one while off (nan before a decision, and where whole batches' own
            progress was within 2 standard errors of zero: no ratio, the verdict read the difference alone).
        auto_decisions: ``(step, on, keep, tau, speedup)`` at each of the last decisions (bounded).
        auto_reason: the last decision in words: what the trial compared, what it decided and why (each share's
            measured speed-up and its distance from the bar), the variance model's prediction, and when the next
            trial comes.
        auto_trials: trials completed.
        auto_trial_share: share of the routed loader batches that were trial windows (nan without auto).
        samples_checked: samples sbdata scored a second time to check itself (the precision check's extra passes
            and the scoring-mode check's passes on observed batches); their seconds are in ``scoring_seconds``.
        precision_checks: batches scored both at ``autocast_dtype`` and at full precision (``autocast_check_every``)
            whose agreement has been read.
        precision_agreement: running mean over those batches of the kept sets' agreement ``|A ∩ B| / k`` (the
            share of the samples top-k keeps at full precision that it also keeps at ``autocast_dtype``; 1.0: the
            same samples); nan before the first check.
        precision_fallback: whether scoring fell back to full precision (the agreement fell below 0.9).
        score_mode_checks: observed batches whose scoring-mode losses were compared with their training losses.
        score_mode_ratio: mean over those batches of the ratio of the scoring pass's mean loss to the mean training
            loss of the same samples (about 1 when the two agree; far above 1 when eval-mode BatchNorm statistics
            are off); nan before the first check.
    """

    steps: int
    sb_steps: int
    samples_seen: int
    samples_scored: int
    samples_reused: int
    samples_kept: int
    samples_yielded: int
    mean_loss_kept: float
    mean_loss_dropped: float
    scoring_seconds: float
    auto_on: bool = False
    auto_on_share: float = math.nan
    auto_keep: float = math.nan
    auto_tau: float = math.nan
    auto_score_share: float = math.nan
    auto_speedup: float = math.nan
    auto_decisions: tuple[tuple[float, ...], ...] = ()
    auto_reason: str = ""
    auto_trials: int = 0
    auto_trial_share: float = math.nan
    samples_checked: int = 0
    precision_checks: int = 0
    precision_agreement: float = math.nan
    precision_fallback: bool = False
    score_mode_checks: int = 0
    score_mode_ratio: float = math.nan

    @property
    def backprop_fraction(self) -> float:
        """Share of the samples seen that reached the training loop (1.0 without selection)."""
        return self.samples_yielded / self.samples_seen if self.samples_seen else math.nan

    def postfix(self) -> dict[str, str]:
        """Short strings for a progress bar, e.g. ``tqdm.set_postfix(loader.stats.postfix())``; with ``keep="auto"``
        also whether selection is on (and at which share), ``tau`` and the last trial's measured speed-up."""
        shown = {
            "bp": f"{self.backprop_fraction:.2f}",
            "kept_loss": f"{self.mean_loss_kept:.3f}",
            "dropped_loss": f"{self.mean_loss_dropped:.3f}",
        }
        if not math.isnan(self.auto_on_share):
            shown["auto"] = f"on {self.auto_keep:.2f}" if self.auto_on else "off"
            shown["tau"] = f"{self.auto_tau:.2f}"
            shown["x"] = "n/a" if math.isnan(self.auto_speedup) else f"{self.auto_speedup:.2f}"
        return shown

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "backprop_fraction": self.backprop_fraction}

    def __str__(self) -> str:
        """The fields a user reads, as ``print(loader.stats)`` shows them: the counts, the share that reached the
        backward pass, the kept and dropped samples' mean loss and the scoring seconds, then what applies to this
        run (reused, checked, ``keep="auto"``'s decision, the precision check); a value that is nan, 0 or False
        (nothing measured yet, or not used) is left out. ``repr`` and :meth:`as_dict` hold every field."""
        auto = not math.isnan(self.auto_on_share)
        shown = []
        for index, name in enumerate(_SHOWN):
            value = getattr(self, name)
            if name.startswith("auto_") and not auto:
                continue
            if index >= 4 and name != "auto_on" and (value is False or value == 0 or value != value):
                continue
            shown.append(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}")
        return f"SBStats({', '.join(shown)})"


class StatsTracker:
    """Counters on the host and loss sums on the scoring device: updating never synchronises.

    Reading :meth:`snapshot` moves two numbers to the host (one synchronisation, at the reader's choice).
    """

    _COUNTERS = (
        "steps",
        "sb_steps",
        "samples_seen",
        "samples_scored",
        "samples_reused",
        "samples_kept",
        "samples_yielded",
    )

    def __init__(self) -> None:
        self.steps = self.sb_steps = 0
        self.samples_seen = self.samples_scored = self.samples_reused = self.samples_kept = self.samples_yielded = 0
        self.scoring_seconds = 0.0
        self._candidates = 0  # samples selection ranked (finite ones under nan_policy='drop')
        # finite losses only: [kept sum, all sum, kept count, all count], float64 on the scoring device
        self._loss_sums: torch.Tensor | None = None
        self._unsummed: list[tuple[torch.Tensor, torch.Tensor]] = []  # (losses, kept index) of steps not yet summed
        self._checked = 0  # samples scored again by the self-checks
        self._precision = (0, 0.0, False)  # (checks, sum of agreements, fell back)
        self._mode = (0, 0.0)  # (checks, sum of ratios)

    def precision_checked(self, agreement: float, samples: int) -> None:
        """One precision check landed: the kept sets' ``agreement`` on a batch, for which ``samples`` more samples
        were scored."""
        checks, total, fell_back = self._precision
        self._precision = (checks + 1, total + agreement, fell_back)
        self._checked += samples

    def precision_fell_back(self) -> None:
        """Scoring fell back to full precision for the rest of the run."""
        checks, total, _ = self._precision
        self._precision = (checks, total, True)

    def precision_checks(self) -> int:
        """Precision checks landed so far."""
        return self._precision[0]

    def precision_agreement(self) -> float:
        """The running mean of the landed precision checks' agreements (nan before the first)."""
        checks, total, _ = self._precision
        return total / checks if checks else math.nan

    def score_mode_checked(self, ratio: float, samples: int) -> None:
        """One scoring-mode check on an observed batch: the ``ratio`` of its mean scoring-mode loss to its mean
        training loss, for which ``samples`` samples were scored."""
        checks, total = self._mode
        self._mode = (checks + 1, total + ratio)
        self._checked += samples

    def score_mode_checks(self) -> int:
        """Scoring-mode checks landed so far."""
        return self._mode[0]

    def score_mode_ratio(self) -> float:
        """The mean of the scoring-mode checks' ratios (nan before the first)."""
        checks, total = self._mode
        return total / checks if checks else math.nan

    # One method per event: the parts that count (intake, the SB step, the engine) call these and never write the
    # counters themselves.
    def batch_processed(self, n: int) -> None:
        """A loader batch of ``n`` samples was processed (a plain step or an SB step)."""
        self.steps += 1
        self.samples_seen += n

    def sb_step_started(self) -> None:
        """An SB step began selecting from a loader batch."""
        self.sb_steps += 1

    def scored(self, n: int, reused: int = 0) -> None:
        """``n`` samples went through a scoring forward; ``reused`` more took their loss from the cache."""
        self.samples_scored += n
        self.samples_reused += reused

    def scoring_timed(self, seconds: float) -> None:
        """An SB step spent ``seconds`` (host wall-clock) in scoring and selection."""
        self.scoring_seconds += seconds

    def yielded(self, n: int) -> None:
        """An output batch of ``n`` samples was handed to the training loop."""
        self.samples_yielded += n

    def record_selection(self, losses: torch.Tensor, index: torch.Tensor) -> None:
        """Count one SB step's selection; its loss sums are added up lazily, ``LAZY_STEPS`` steps at a time."""
        self._unsummed.append((losses, index))
        if len(self._unsummed) >= LAZY_STEPS:
            self._sum()
        self.samples_kept += index.shape[0]
        self._candidates += losses.shape[0]

    def _sum(self) -> None:
        """Add the finite loss sums and counts of the steps recorded since the last call (device ops, no sync)."""
        if not self._unsummed:
            return
        steps, self._unsummed = self._unsummed, []
        losses, indices = [losses for losses, _ in steps], [index for _, index in steps]
        head, first = losses[0], indices[0]
        if (
            head.is_floating_point()
            and all(x.shape == head.shape and x.dtype == head.dtype for x in losses)
            and all(i.shape == first.shape and i.dtype == torch.int64 for i in indices)
        ):  # the unpooled fixed-count path: one (steps, N) table, the kept ones gathered from it in one op
            every = torch.stack(losses)
            kept_at = torch.stack(indices)
            every_finite = torch.isfinite(every)
            every_clean = torch.nan_to_num(every, nan=0.0, posinf=0.0, neginf=0.0)
            kept_finite, kept_clean = every_finite.gather(1, kept_at), every_clean.gather(1, kept_at)
        else:
            kept = torch.cat([losses.index_select(0, index) for losses, index in steps])
            every = torch.cat(losses)
            kept_finite, every_finite = torch.isfinite(kept), torch.isfinite(every)
            kept_clean, every_clean = torch.where(kept_finite, kept, 0), torch.where(every_finite, every, 0)
        sums = torch.stack(
            [
                kept_clean.sum(dtype=torch.float64),
                every_clean.sum(dtype=torch.float64),
                kept_finite.sum(dtype=torch.float64),
                every_finite.sum(dtype=torch.float64),
            ]
        )
        if self._loss_sums is None:
            self._loss_sums = sums
        else:
            self._loss_sums = self._loss_sums + sums.to(self._loss_sums.device)  # not in place: see counters()

    def counters(self) -> tuple[Any, ...]:
        """Everything a batch adds, to put back with :meth:`restore_counters` if processing it fails (once per SB
        step, so spelt out: the unsummed list is kept by reference with its length, since :meth:`_sum` replaces it
        rather than emptying it and :meth:`record_selection` only appends)."""
        unsummed = self._unsummed
        return (
            self.steps, self.sb_steps, self.samples_seen, self.samples_scored, self.samples_reused,
            self.samples_kept, self.samples_yielded, self._candidates, self._loss_sums, unsummed, len(unsummed),
        )  # fmt: skip

    def restore_counters(self, saved: tuple[Any, ...]) -> None:
        (
            self.steps, self.sb_steps, self.samples_seen, self.samples_scored, self.samples_reused,
            self.samples_kept, self.samples_yielded, self._candidates, self._loss_sums, unsummed, count,
        ) = saved  # fmt: skip
        del unsummed[count:]
        self._unsummed = unsummed

    def counts(self) -> dict[str, int]:
        """The integer fields of :class:`SBStats` (steps and sample counts), read on the host: no loss sums."""
        return {name: getattr(self, name) for name in self._COUNTERS}

    def snapshot(self) -> SBStats:
        self._sum()
        kept_sum, all_sum, kept, seen = [0.0] * 4 if self._loss_sums is None else self._loss_sums.tolist()
        dropped_sum = all_sum - kept_sum
        dropped = seen - kept
        return SBStats(
            **{name: getattr(self, name) for name in self._COUNTERS},
            mean_loss_kept=kept_sum / kept if kept else math.nan,
            mean_loss_dropped=dropped_sum / dropped if dropped else math.nan,
            scoring_seconds=self.scoring_seconds,
            samples_checked=self._checked,
            precision_checks=self._precision[0],
            precision_agreement=self.precision_agreement(),
            precision_fallback=self._precision[2],
            score_mode_checks=self._mode[0],
            score_mode_ratio=self.score_mode_ratio(),
        )

    def state_dict(self) -> dict[str, Any]:
        self._sum()
        state: dict[str, Any] = {name: getattr(self, name) for name in self._COUNTERS}
        state["scoring_seconds"] = self.scoring_seconds
        state["candidates"] = self._candidates
        state["loss_sums"] = None if self._loss_sums is None else self._loss_sums.clone()
        state["checks"] = {"samples": self._checked, "precision": list(self._precision), "mode": list(self._mode)}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self._COUNTERS:
            setattr(self, name, int(state[name]))
        self.scoring_seconds = float(state["scoring_seconds"])
        self._candidates = int(state["candidates"])
        sums = state["loss_sums"]
        self._loss_sums = None if sums is None else sums.clone()
        self._unsummed = []
        checks = state["checks"]
        self._checked = int(checks["samples"])
        count, total, fell_back = checks["precision"]
        self._precision = (int(count), float(total), bool(fell_back))
        count, total = checks["mode"]
        self._mode = (int(count), float(total))
