"""Turn run records into the numbers the README reports: cost to reach an accuracy, accuracy at equal cost.

Every run is a separate annealed run of a fixed budget (epochs), so an arm's *budget curve* is its final accuracy
against its cost over budgets. "Cost to reach accuracy A" interpolates that curve linearly (the primary number,
since accuracy peaks at the end of an annealed schedule); "first crossing" reads the test curve inside the arm's
largest-budget run (reported too, and optimistic for short budgets' sake it is not). Costs are forward-equivalents
(FE, noise-free) and wall-clock seconds (median over seeds at each budget; min/median/max reported).
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from typing import Any


def group(records: list[dict[str, Any]]) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """``{arm: {epochs: [records over seeds]}}``, arms in first-seen order."""
    out: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        out[r["arm"]][r["epochs"]].append(r)
    return {arm: dict(sorted(by.items())) for arm, by in out.items()}


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def or_never(value: float | None, unit: str = "x", spec: str = ".2f", how: str = "") -> str:
    """``value`` formatted (``1.23x`` by default), or ``never`` where it is None (the target was not reached);
    ``how``: :func:`reach`'s, whose ``"at or below"`` (an upper bound) prefixes ``<=``."""
    return "never" if value is None else f"{'<=' if how == 'at or below' else ''}{value:{spec}}{unit}"


def percent(value: float | None, sd: float | None = None) -> str:
    """A share in percent with two decimals (and `` ± sd``), or ``n/a`` where it is None."""
    return "n/a" if value is None else f"{100 * value:.2f}" + ("" if sd is None else f" ± {100 * sd:.2f}")


def reach(points: list[tuple[float, float]], target: float) -> tuple[float | None, str]:
    """Cost at which a piecewise-linear (cost, accuracy) curve first reaches ``target``.

    Returns ``(cost, how)``: ``how`` is ``"interpolated"``, ``"at or below"`` (already reached at the cheapest
    point, so the cost is an upper bound) or ``"never"`` (not reached at any measured point; cost None).
    """
    points = sorted(points)
    if not points:
        return None, "never"
    if points[0][1] >= target:
        return points[0][0], "at or below"
    for (c0, a0), (c1, a1) in itertools.pairwise(points):
        if a0 < target <= a1:
            return c0 + (c1 - c0) * (target - a0) / (a1 - a0), "interpolated"
    return None, "never"


def curve(run: dict[str, Any]) -> list[tuple[float, float]]:
    """A run's test curve as (seconds, accuracy) points."""
    return [(p["seconds"], p["accuracy"]) for p in run["curve"]]


def mean_curve(runs: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """The seed-mean test curve: seconds and accuracy averaged over the runs at each of their evaluations (every run
    of an arm evaluates at the same shares of its training)."""
    points = min(len(run["curve"]) for run in runs)
    return [(mean([curve(run)[i][0] for run in runs]), mean([curve(run)[i][1] for run in runs])) for i in range(points)]


def seconds_to(runs: list[dict[str, Any]], target: float) -> float | None:
    """Seconds at which the runs' seed-mean curve first reaches ``target`` (interpolated); None if it never does."""
    return reach(mean_curve(runs), target)[0]


def at_cost(points: list[tuple[float, float]], cost: float) -> float | None:
    """Accuracy of a piecewise-linear (cost, accuracy) curve at ``cost``; None outside the measured range."""
    points = sorted(points)
    if not points or not points[0][0] <= cost <= points[-1][0]:
        return None
    for (c0, a0), (c1, a1) in itertools.pairwise(points):
        if c0 <= cost <= c1:
            return a0 if c1 == c0 else a0 + (a1 - a0) * (cost - c0) / (c1 - c0)
    return points[-1][1]


def seeds_of(by_epochs: dict[int, list[dict[str, Any]]]) -> list[int]:
    return sorted({r["seed"] for runs in by_epochs.values() for r in runs})


def budget_curve(by_epochs: dict[int, list[dict[str, Any]]], axis: str, seed: int | None = None) -> list:
    """(cost, accuracy) per budget: seed means (cost ``axis`` as median for seconds), or one seed's points."""
    points = []
    for runs in by_epochs.values():
        chosen = runs if seed is None else [r for r in runs if r["seed"] == seed]
        if not chosen:
            continue
        costs = [r[axis] for r in chosen]
        cost = statistics.median(costs) if axis == "seconds" else mean(costs)
        points.append((cost, mean([r["accuracy"] for r in chosen])))
    return points


def first_crossing(runs: list[dict[str, Any]], target: float, axis: str) -> float | None:
    """Median over seeds of the cost at which the test curve inside a run first reaches ``target``."""
    costs = []
    for r in runs:
        cost, how = reach([(p[axis], p["accuracy"]) for p in r["curve"]], target)
        costs.append(cost if how != "never" else float("inf"))
    value = statistics.median(costs) if costs else float("inf")
    return None if value == float("inf") else value


def summarise(records: list[dict[str, Any]], *, reference: str = "baseline", equal_cost: float = 0.6) -> dict[str, Any]:
    """Per-arm summary against the reference arm's largest budget.

    Args:
        records: run records of one suite.
        reference: the arm whose final accuracy (seed mean at its largest budget) is the target.
        equal_cost: the FE (as a share of the reference's) at which every arm's accuracy is compared.
    """
    arms = group(records)
    if reference not in arms:
        raise ValueError(f"no runs of the reference arm {reference!r}")
    ref_runs = arms[reference][max(arms[reference])]
    target = mean([r["accuracy"] for r in ref_runs])
    ref_cost = {"fe": mean([r["fe"] for r in ref_runs]), "seconds": statistics.median([r["seconds"] for r in ref_runs])}
    budget = equal_cost * ref_cost["fe"]
    out: dict[str, Any] = {
        "reference": reference,
        "reference_epochs": max(arms[reference]),
        "target_accuracy": target,
        "reference_cost": ref_cost,
        "equal_cost_fe": budget,
        "arms": {},
    }
    for arm, by_epochs in arms.items():
        seeds = seeds_of(by_epochs)
        top = by_epochs[max(by_epochs)]
        row: dict[str, Any] = {"config": top[0]["config"], "epochs": list(by_epochs), "seeds": seeds, "budgets": []}
        for epochs, runs in by_epochs.items():
            secs = [r["seconds"] for r in runs]
            row["budgets"].append(
                {
                    "epochs": epochs,
                    "n": len(runs),
                    "accuracy_mean": mean([r["accuracy"] for r in runs]),
                    "accuracy_sd": sd([r["accuracy"] for r in runs]),
                    "fe": mean([r["fe"] for r in runs]),
                    "fe_ratio": mean([r["fe"] for r in runs]) / ref_cost["fe"],
                    "seconds": [min(secs), statistics.median(secs), max(secs)],
                    "noisy_share": mean([r["noisy_share"] for r in runs if r.get("noisy_share") is not None]),
                }
            )
        for axis in ("fe", "seconds"):
            cost, how = reach(budget_curve(by_epochs, axis), target)
            per_seed = [reach(budget_curve(by_epochs, axis, s), target)[0] for s in seeds]
            row[f"reach_{axis}"] = None if cost is None else cost / ref_cost[axis]
            row[f"reach_{axis}_how"] = how
            row[f"reach_{axis}_seeds"] = [None if c is None else c / ref_cost[axis] for c in per_seed]
            first = first_crossing(top, target, axis)
            row[f"first_{axis}"] = None if first is None else first / ref_cost[axis]
        eq = [at_cost(budget_curve(by_epochs, "fe", s), budget) for s in seeds]
        row["equal_cost_accuracy"] = eq
        row["equal_cost_mean"] = None if any(v is None for v in eq) else mean(eq)
        row["equal_cost_sd"] = None if any(v is None for v in eq) else sd(eq)
        row["final_accuracy"] = mean([r["accuracy"] for r in top])
        row["final_sd"] = sd([r["accuracy"] for r in top])
        out["arms"][arm] = row
    return out


def paired_gap(summary: dict[str, Any], arm: str, other: str) -> dict[str, Any] | None:
    """Per-seed accuracy difference at equal cost (same init and data order), in points, with the verdict."""
    a, b = summary["arms"].get(arm), summary["arms"].get(other)
    if a is None or b is None or a["equal_cost_mean"] is None or b["equal_cost_mean"] is None:
        return None
    common = [s for s in a["seeds"] if s in b["seeds"]]
    diffs = [
        100 * (a["equal_cost_accuracy"][a["seeds"].index(s)] - b["equal_cost_accuracy"][b["seeds"].index(s)])
        for s in common
    ]
    spread = 100 * max(a["equal_cost_sd"], b["equal_cost_sd"])
    return {"mean": mean(diffs), "min": min(diffs), "max": max(diffs), "spread": spread, "beats": mean(diffs) > spread}
