"""``advise``'s price list: every option's predicted speed-up, as a range, from a cost table and the spread of the
scores; and the recommendation it supports before any trial."""

from __future__ import annotations

import math
from typing import Any

from sbdata.advice._settings import Candidates
from sbdata.auto import CostTable, small_batch_speedup, speedup_range
from sbdata.policies import keep_count

MARGIN = 0.05  # a speed-up must exceed 1 + MARGIN to be recommended (keep="auto"'s default margin)
FLAT_TAU = 1.2  # below this tau the losses are called "nearly alike" in the recommendation

Priced = tuple[list[dict[str, Any]], str, str]
"""``(rows, recommendation, choice)``: see :class:`~sbdata.Advice`."""


def times(value: float | None) -> str:
    """A speed-up as printed: ``"1.25x"``, ``"never"`` for 0, ``"inf"``, or "" for None."""
    if value is None:
        return ""
    if value == 0:
        return "never"
    return f"{value:.2f}x" if math.isfinite(value) else "inf"


def price(batch: int, per_epoch: int | None, costs: CostTable, tau: float, candidates: Candidates) -> Priced:
    """Every option's row (see ``Advice.rows``), the recommendation from the predicted ranges, and the option it
    names (``"no selection"`` for whole batches)."""
    rows = _rows(batch, costs, tau, candidates)
    for row in rows:
        row["seconds_per_epoch"] = None if per_epoch is None else row["seconds_per_epoch"] * per_epoch
    share = costs.score(batch) / costs.train(batch)
    selection = [row for row in rows[1:] if not row["option"].startswith("smaller batch")]
    smaller = [row for row in rows if row["option"].startswith("smaller batch")]
    best = max(selection, key=lambda row: (row["low"], row["high"]))
    policy = 'policy="importance", score="gradnorm", return_weights=True' if candidates.score == "gradnorm" else (
        "the default policy: the hardest samples")  # fmt: skip
    if best["low"] > 1 + MARGIN:
        choice = best["option"]
        text = (
            f"select: {best['option']} ({policy}) is predicted to train {best['low']:.2f}x to {best['high']:.2f}x as "
            f"fast as whole batches, from the measured cost of scoring and how unequal the losses are "
            f"(tau {tau:.2f}); keep='auto' checks it on your run"
        )
    elif max(row["high"] for row in selection) < 1:
        choice = "no selection"
        text = (
            f"train on whole batches: even if only seconds counted, the best option, {best['option']}, is predicted "
            f"at {max(row['high'] for row in selection):.2f}x the speed of whole batches (below 1: slower), since "
            f"scoring a batch costs {share:.0%} of training on it"
        )
    else:
        choice = best["option"]
        spread = (f"nearly alike (tau {tau:.2f})" if tau < FLAT_TAU else
                  f"unequal (tau {tau:.2f}: a few samples carry much of the loss)")  # fmt: skip
        text = (
            f"measure it: {best['option']} is predicted between {best['low']:.2f}x and {best['high']:.2f}x the speed "
            f"of whole batches (scoring a batch costs {share:.0%} of training on it; the losses are {spread}); where "
            "your run falls in that range, and what the hardest samples are worth on your data, only training "
            "tells: keep='auto' tries it on your run"
        )
    if smaller:
        top = max(smaller, key=lambda row: row["high"])
        text += (
            f"; a smaller batch may do as well without scoring: {top['option']} is predicted "
            f"{top['low']:.2f}x to {top['high']:.2f}x (retune its learning rate)"
        )
    return rows, text, choice


def _rows(batch: int, costs: CostTable, tau: float, candidates: Candidates) -> list[dict[str, Any]]:
    """The rows with ``seconds_per_epoch`` still per loader batch."""
    staleness = candidates.staleness
    reuse = staleness / (staleness + 1)
    rows: list[dict[str, Any]] = [{"option": "no selection", "keep": 1.0, "cache": False, "low": 1.0, "high": 1.0,
                                   "seconds_per_epoch": costs.train(batch)}]  # fmt: skip
    for keep in candidates.keeps:
        for cached in (False, True):
            r = reuse if cached else 0.0
            step = costs.sb_step(batch, keep_count(keep, batch), r).seconds
            name = f"keep={keep}" + (f" + LossCache(staleness={staleness})" if cached else "")
            low, high = speedup_range(tau, keep, batch, costs, r)
            rows.append({"option": name, "keep": keep, "cache": cached, "low": low, "high": high,
                         "seconds_per_epoch": step})  # fmt: skip
    for keep in sorted({k for k in candidates.keeps if k < 1}):
        small = keep_count(keep, batch)
        low, high = small_batch_speedup(keep, batch, costs), small_batch_speedup(keep, batch, costs, 0.0)
        rows.append({"option": f"smaller batch {small} (no selection)", "keep": keep, "cache": False, "low": low,
                     "high": high, "seconds_per_epoch": costs.train(small) * batch / small})  # fmt: skip
    return rows
