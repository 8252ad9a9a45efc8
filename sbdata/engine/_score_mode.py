"""The scoring-mode check: on the first observed batches of a model with BatchNorm-like running statistics scored in
eval mode (``score_mode="eval"``, which the user chose: the default ``"batch"`` normalises with each batch's own
statistics, as training does), compare the scoring pass's losses with the training losses the user observed on the
same samples, and warn once when the scoring losses are far above them.

Early in training (or after a change of data) eval-mode running statistics can be far from the batches' own (a
ResNet-18's eval loss was 36.7 at its second epoch), so eval-mode scores rank samples by statistics the training
step does not use; the default ``score_mode="batch"`` scores with the batch's own statistics (nothing updated).
The check runs where sbdata sees training losses (``observe``), on the first :data:`OBSERVES_CHECKED` calls: each
costs one scoring pass of the observed batch (counted in ``stats.samples_checked``). The ratio of each batch's mean
losses (scoring over training) travels to the host as a :class:`~sbdata.batch.HostCopy` and is read once it has
landed (at a later ``observe``, on the CPU at once, at the latest in ``state_dict``): no synchronisation on the SB
step's path nor in ``observe``. sbdata warns once when the running mean of the landed ratios exceeds
:data:`~sbdata.scoring.MODE_RATIO_LIMIT` (3), from the first landed check on.
Models without running statistics are not checked: eval and train mode then differ only by dropout, which lowers
eval losses rather than raising them.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from sbdata._util import warn_from_user_code
from sbdata.batch import HostCopy
from sbdata.engine._stats import StatsTracker
from sbdata.scoring import MODE_RATIO_LIMIT, Scorer, compare, has_running_stats

OBSERVES_CHECKED = 3  # observed batches compared with the scoring pass, from the first observe() on


class ScoreModeCheck:
    """Compares eval-mode scoring losses with observed training losses on the first observed batches.

    Args:
        scorer: the engine's scorer; the check is off unless it scores losses in eval mode.
        model: the scored module; the check is off unless it has running statistics (:func:`has_running_stats`).
        tracker: the engine's statistics, told of each landed comparison.
    """

    def __init__(self, scorer: Scorer, model: nn.Module, tracker: StatsTracker) -> None:
        active = scorer.score_mode == "eval" and scorer.score == "loss" and has_running_stats(model)
        self.applies = active  # whether observed losses are ever compared (a fixed property of the loader)
        self.left = OBSERVES_CHECKED if active else 0
        self.tracker = tracker
        self.warned = False
        self._pending: list[tuple[HostCopy, int]] = []

    def check(
        self,
        scorer: Scorer,
        model: nn.Module,
        inputs: Any,
        targets: Any,
        n: int,
        device: torch.device,
        observed: torch.Tensor,
    ) -> None:
        """Score an observed batch (while checks are left), send the ratio of its mean scoring loss to the mean
        ``observed`` loss on its way, and read the landed ones."""
        if self.left:
            self.left -= 1
            scores = scorer(model, inputs, targets, n, device)
            ratio = compare(scores, observed.detach().to(scores.device), 1.0).ratio
            self._pending.append((HostCopy(ratio), n))
        self._read(wait=False)

    @property
    def in_flight(self) -> bool:
        """Whether a comparison has not been read yet."""
        return bool(self._pending)

    def settle_landed(self) -> None:
        """Read the comparisons that have landed (never waits)."""
        self._read(wait=False)

    def settle(self) -> None:
        """Read every comparison still in flight (``state_dict`` calls it)."""
        self._read(wait=True)

    def _read(self, wait: bool) -> None:
        landed = [item for item in self._pending if wait or item[0].ready()]
        if not landed:
            return
        self._pending = [item for item in self._pending if item not in landed]
        for copy, samples in landed:
            ratio = float(copy.value())
            if math.isfinite(ratio):
                self.tracker.score_mode_checked(ratio, samples)
        ratio = self.tracker.score_mode_ratio()
        if self.warned or not ratio > MODE_RATIO_LIMIT:
            return
        self.warned = True
        warn_from_user_code(
            f'the scoring pass (score_mode="eval": BatchNorm\'s running statistics) gives losses {ratio:.1f}x the '
            f"training losses you observed on the same samples (mean losses, over {self.tracker.score_mode_checks()} "
            f"batch(es); sbdata warns above {MODE_RATIO_LIMIT:g}x): the running statistics are still far from the "
            'batches\' own, so selection ranks samples by statistics training does not use. Pass score_mode="batch" '
            "(the default: scores with each batch's own statistics, as training does, and updates nothing)"
        )

    def state_dict(self) -> dict[str, Any]:
        """Checks left and whether it warned (after reading what is in flight)."""
        self.settle()
        return {"left": self.left, "warned": self.warned}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending = []
        self.left = min(self.left, int(state["left"])) if self.left else 0
        self.warned = bool(state["warned"])
