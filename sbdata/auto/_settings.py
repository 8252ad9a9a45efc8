"""``keep="auto"``: select only while the online gain estimate says it pays (``docs/method_card.md``, "Does
selection pay?").

:class:`Auto` holds the settings; ``sbdata._controller.AutoController`` is the engine's part that decides.
Per routed loader batch it only checks counters; every ``every`` scored steps (SB steps, and probes while off) it
reads the device sums of the scores (:func:`~sbdata.gain.score_sums`) of the window before, smooths ``tau``,
predicts the speed-up of the best share (:func:`~sbdata.gain.best_keep`) from the cost table, and decides with
hysteresis: on above ``1 + margin``, off below 1. The read is of a ``HostCopy`` issued one window earlier, so it
never waits for the device; under ``torch.distributed`` one ``all_reduce`` makes every rank decide alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sbdata.auto._gain import CostTable

__all__ = ["BIASED_MIN_KEEP", "UNBIASED_MIN_KEEP", "Auto", "as_auto"]

UNBIASED_MIN_KEEP = 0.1  # the default lowest share for unbiased importance sampling (weighted, return_weights=True)
BIASED_MIN_KEEP = 0.5  # ... for every other policy: below it top-k chased noise in the benchmarks


@dataclass(frozen=True)
class Auto:
    """Settings of ``keep="auto"`` (``"auto"`` is ``Auto()``).

    Selection starts off. The first read, after ``probes`` probes, only starts the window's copy to the host; the
    first decision comes at the second read, from that window (with the defaults, after 8 probes: 256 loader
    batches). From then on, one decision per ``every`` SB steps while on, per ``probes`` probes while off.

    Attributes:
        min_keep / max_keep: the range of shares selection may keep, 0 < min_keep <= max_keep <= 1. Default
            ``min_keep`` None: 0.1 for unbiased importance sampling (a weighted policy with ``return_weights=True``,
            whose gain the estimate prices), 0.5 for any other policy (top-k and the unweighted samplers train on a
            biased subset, which the estimate does not price: in the benchmarks top-k at keep 0.1-0.25 chased label
            noise and lost up to 1.2 points even on clean data). ``max_keep`` default 0.9.
        margin: selection turns on when the predicted speed-up exceeds ``1 + margin``, and off below 1, >= 0.
            Default 0.05.
        every: SB steps per read and decision while on, an int >= 1. Default 16.
        probe_every: while off, every ``probe_every``-th loader batch is scored (and still yielded whole), an int
            >= 1. Default 32: a probe costs one scoring forward, so while off the controller costs about
            ``score[B] / (probe_every * train[B])`` of a step (under 1% for the benchmark ConvNet).
        probes: probes per read and decision while off, an int >= 1. Default 4 (a decision per 128 loader batches
            with the defaults).
        grid: step of the grid of shares tried, in (0, 1]. Default 0.05.
        smoothing: EMA factor of ``tau`` per read, in [0, 1). Default 0.9.
        costs: a fixed :class:`~sbdata.CostTable` (tests; or a calibrated one); None measures live.
        clock: seconds for the live measurement; None uses ``time.thread_time`` on the CPU, CUDA events for the
            scoring pass on CUDA. Ignored with ``costs``.
        decisions_kept: decisions kept in ``stats.auto_decisions``, an int >= 1. Default 32.
    """

    min_keep: float | None = None
    max_keep: float = 0.9
    margin: float = 0.05
    every: int = 16
    probe_every: int = 32
    probes: int = 4
    grid: float = 0.05
    smoothing: float = 0.9
    costs: CostTable | None = None
    clock: Callable[[], float] | None = None
    decisions_kept: int = 32

    def __post_init__(self) -> None:
        for name, fix in (
            ("min_keep", "a share in (0, 1], e.g. 0.1, or None for the policy's default"),
            ("max_keep", "a share in (0, 1], e.g. 0.9"),
            ("grid", "a step in (0, 1], e.g. 0.05"),
        ):
            value = getattr(self, name)
            if not (name == "min_keep" and value is None):  # None: the policy's default
                _check_number(name, value, _is_share, fix)
        _check_number("margin", self.margin, lambda v: 0 <= v < math.inf, "a finite number >= 0, e.g. 0.05")
        _check_number("smoothing", self.smoothing, lambda v: 0 <= v < 1, "a factor in [0, 1), e.g. 0.9")
        if self.min_keep is not None and self.min_keep > self.max_keep:
            raise ValueError(
                f"Auto(min_keep={self.min_keep}, max_keep={self.max_keep}): min_keep must not exceed max_keep; "
                "swap them or widen the range"
            )
        for name in ("every", "probe_every", "probes", "decisions_kept"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Auto.{name} must be an int >= 1, got {value!r}: pass e.g. {name}=16")
        if self.costs is not None and not isinstance(self.costs, CostTable):
            raise TypeError(f"Auto.costs must be a sbdata.CostTable or None, got {type(self.costs).__name__}")
        if self.clock is not None and not callable(self.clock):
            raise TypeError(f"Auto.clock must be callable() -> seconds or None, got {type(self.clock).__name__}")

    def lowest_keep(self, unbiased: bool) -> float:
        """The smallest share selection may keep: ``min_keep``, or its default for an ``unbiased`` (weighted,
        ``return_weights=True``) or biased policy, at most ``max_keep``."""
        default = UNBIASED_MIN_KEEP if unbiased else BIASED_MIN_KEEP
        return min(self.max_keep, default if self.min_keep is None else self.min_keep)

    def describe(self) -> str:
        """The settings a saved state depends on, for the options fingerprint."""
        return (
            f"auto(min_keep={self.min_keep}, max_keep={self.max_keep}, margin={self.margin}, every={self.every}, "
            f"probe_every={self.probe_every}, probes={self.probes}, grid={self.grid}, smoothing={self.smoothing})"
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
