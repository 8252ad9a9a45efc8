"""The live check of low-precision scoring (``autocast_dtype=``): every N-th SB step one batch is scored at full
precision too, and when the kept sets agree too little, sbdata says so once and scores at full precision from then on.

Each check compares the low-precision scores of the batch (the step's own, or, with a ``LossCache``, a low-precision
pass of the whole batch) with a full-precision pass (:func:`~sbdata.scoring.compare`): the share of the samples
top-k keeps at the step's ``keep`` under both, ``|A ∩ B| / k``. The agreement travels to the host as a
:class:`~sbdata.batch.HostCopy` and is read once it has landed, at a later check step (on the CPU at once), so the
check adds no host-device synchronisation; ``state_dict`` reads what is still in flight. The running mean of the
landed agreements is on ``loader.stats`` (``precision_agreement``, ``precision_checks``); the extra passes'
samples are counted in ``samples_checked`` and their seconds in ``scoring_seconds``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from sbdata._util import warn_from_user_code
from sbdata.batch import HostCopy
from sbdata.engine._stats import StatsTracker
from sbdata.scoring import Scorer, compare

AGREEMENT_FLOOR = 0.9  # below this running mean of the kept sets' agreement, scoring falls back to full precision
DEFAULT_CHECK_EVERY = 100  # SB steps between checks: one extra full-precision pass per 100 (1% more scoring)


class PrecisionCheck:
    """Checks ``scorer``'s low-precision scores against full precision every ``every``-th SB step.

    Args:
        scorer: the engine's scorer; the check is off unless it has an ``autocast_dtype``.
        every: SB steps between checks, an int >= 0; 0 turns the check off. The first check is at the
            ``every``-th SB step (the first steps of a run, where every loss is nearly the same, are not judged).
        tracker: the engine's statistics, told of each landed check and of the fallback.

    Raises:
        ValueError: for ``every`` not an int >= 0.
    """

    def __init__(self, scorer: Scorer, every: int, tracker: StatsTracker) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(
                f"autocast_check_every must be an int >= 0 (SB steps between checks of autocast_dtype= scoring "
                f"against full precision; 0: never), got {every!r}"
            )
        self.low = scorer
        self.full = scorer.replace(autocast_dtype=None)
        self.every = every if scorer.autocast_dtype is not None else 0
        self.tracker = tracker
        self.fell_back = False
        self._pending: list[tuple[HostCopy, int]] = []  # (agreement on its way to the host, samples checked)

    @property
    def scorer(self) -> Scorer:
        """The scorer to use now: the low-precision one, or the full-precision one after a fallback."""
        return self.full if self.fell_back else self.low

    def due(self, sb_steps: int) -> bool:
        """Whether the SB step counted ``sb_steps`` (from 1) checks its scores."""
        return self.every > 0 and not self.fell_back and sb_steps % self.every == 0

    def check(
        self,
        low: torch.Tensor | None,
        model: nn.Module,
        inputs: Any,
        targets: Any,
        n: int,
        device: torch.device,
        seed: int | None,
        keep: float,
    ) -> bool:
        """Score the batch at full precision (and at low precision where ``low`` is None), send the agreement on
        its way, and read every landed one.

        Returns:
            True when scoring has just fallen back to full precision (the caller takes :attr:`scorer` again).
        """
        if low is None:
            low = self.low(model, inputs, targets, n, device, seed)
            n_scored = 2 * n
        else:
            n_scored = n
        full = self.full(model, inputs, targets, n, device, seed)
        self._pending.append((HostCopy(compare(low, full, keep).agreement), n_scored))
        return self._read(wait=False)

    def settle(self) -> None:
        """Read every check still in flight (one synchronisation at most; ``state_dict`` calls it)."""
        self._read(wait=True)

    def _read(self, wait: bool) -> bool:
        """Record the landed agreements (all, with ``wait``); fall back once their running mean is below the floor."""
        landed = [item for item in self._pending if wait or item[0].ready()]
        if not landed:
            return False
        self._pending = [item for item in self._pending if item not in landed]
        for copy, samples in landed:
            self.tracker.precision_checked(float(copy.value()), samples)
        mean = self.tracker.precision_agreement()
        if self.fell_back or not mean < AGREEMENT_FLOOR:
            return False
        self.fell_back = True
        self.tracker.precision_fell_back()
        checks = self.tracker.precision_checks()
        warn_from_user_code(
            f"autocast_dtype={self.low.autocast_dtype} scoring and full-precision scoring disagree on which samples "
            f"to keep: over {checks} checked batch(es), only {mean:.0%} of the samples kept at full precision were "
            f"also kept at {self.low.autocast_dtype} (sbdata expects at least {AGREEMENT_FLOOR:.0%}). sbdata scores at "
            "full precision for the rest of the run (loader.stats.precision_fallback). To score in low precision "
            "anyway, pass autocast_check_every=0; to save the checks' cost, leave autocast_dtype= out"
        )
        return True

    def state_dict(self) -> dict[str, Any] | None:
        """Whether scoring fell back (after reading what is in flight); None while the check is off."""
        self.settle()
        return None if self.every == 0 else {"fell_back": self.fell_back}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        self._pending = []
        self.fell_back = bool(state is not None and self.every and state["fell_back"])
