"""The budget-matched tuned frontier, read at a budget.

Every run is a separate annealed run of its own budget. A family's configurations (batch, LR, epochs) are points of
(priced seconds, seed-mean metric); its *envelope* is its best metric within each cost, read as a piecewise-linear
curve through the points where it rises. The *frontier* is plain training's envelope. At a budget X (seconds), the
frontier's value ``F(X)`` is its envelope read at X; a family's *ratio* at X is the seconds at which its envelope
first reaches ``F(X)`` over the frontier's own (below 1 pays; None: it never does). Per seed, the same on that seed's
runs alone. Comparisons with a budget allow a relative tolerance of :data:`TOLERANCE`.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from typing import Any

from .domain import Metric

TOLERANCE = 1e-9  # relative: a configuration priced at the budget to rounding is within it
PLAIN = "plain"


def configurations(records: list[dict[str, Any]], metric: Metric, seed: int | None = None) -> dict[str, list[dict]]:
    """By family, its configurations (batch, LR, epochs) with seed-mean (or one seed's) priced seconds and metrics
    (every ``<prefix>_*`` key), and ``keep="auto"``'s mean on-share where it ran."""
    grouped: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if seed is None or r["seed"] == seed:
            grouped[(r["family_arm"], r["config"]["batch"], r["config"]["lr"], r["epochs"])].append(r)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (family, batch, lr, epochs), runs in grouped.items():
        point: dict[str, Any] = {"batch": batch, "lr": lr, "epochs": epochs, "seeds": len(runs)}
        for key in runs[0]:
            if key == "seconds" or key.startswith(f"{metric.prefix}_"):
                point[key] = statistics.fmean(r[key] for r in runs)
        if "auto" in runs[0]:
            point["auto_on_share"] = statistics.fmean(r["auto"]["on_share"] for r in runs)
        out[family].append(point)
    return dict(out)


def envelope(points: list[dict[str, Any]], metric: Metric) -> list[tuple[float, float]]:
    """A family's envelope as ``(seconds, signed metric)`` points: its best metric within each cost, where it rises."""
    out: list[tuple[float, float]] = []
    for p in sorted(points, key=lambda p: (p["seconds"], -metric.signed(p[metric.key]))):
        value = metric.signed(p[metric.key])
        if not out or value > out[-1][1]:
            out.append((p["seconds"], value))
    return out


def value_at(curve: list[tuple[float, float]], seconds: float) -> float | None:
    """The piecewise-linear envelope at ``seconds``; its last value beyond it; None before its first point."""
    if not curve or seconds < curve[0][0] * (1 - TOLERANCE):
        return None
    for (c0, v0), (c1, v1) in itertools.pairwise(curve):
        if c0 <= seconds <= c1:
            return v0 + (v1 - v0) * (seconds - c0) / (c1 - c0) if c1 > c0 else v1
    return curve[-1][1] if seconds >= curve[-1][0] else curve[0][1]


def reach(curve: list[tuple[float, float]], target: float) -> float | None:
    """The seconds at which a piecewise-linear ``(seconds, value)`` curve first reaches ``target`` (its first point
    where that already does; None where it never does)."""
    points = sorted(curve)
    if points and points[0][1] >= target:
        return points[0][0]
    for (c0, a0), (c1, a1) in itertools.pairwise(points):
        if a0 < target <= a1:
            return c0 + (c1 - c0) * (target - a0) / (a1 - a0)
    return None


def read_at(points: dict[str, list[dict[str, Any]]], budgets: list[float], metric: Metric) -> list[dict | None]:
    """Per budget: the frontier's value there (``target``, in the metric's own sign), its seconds to it, and per
    family the seconds to it and the ratio (None: never); None where no plain configuration fits the budget."""
    out: list[dict[str, Any] | None] = []
    frontier = envelope(points[PLAIN], metric)
    for budget in budgets:
        target = value_at(frontier, budget)
        if target is None:
            out.append(None)
            continue
        base = reach(frontier, target)
        assert base is not None
        families = {}
        for family, pts in points.items():
            seconds = reach(envelope(pts, metric), target)
            families[family] = None if seconds is None else seconds / base
        out.append({"budget": budget, "target": metric.signed(target), "base": base, "ratios": families})
    return out


def per_seed(records: list[dict[str, Any]], budgets: list[float], metric: Metric) -> dict[int, list[dict | None]]:
    """:func:`read_at` on each seed's runs alone (each seed's own frontier)."""
    seeds = sorted({r["seed"] for r in records})
    return {s: read_at(configurations(records, metric, s), budgets, metric) for s in seeds}
