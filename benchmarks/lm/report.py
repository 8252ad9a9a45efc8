"""Tables, targets and the plot of the language-model benchmark (``python -m benchmarks lm report``).

Comparisons at *equal compute* (FE) or *equal seconds* read both runs' validation curves at the smaller of their
two final values (linear interpolation between evaluation points), so a run that overshot its budget by one step
is not penalised or favoured. A comparison is per seed: the same seed means the same initialisation and data order.
"""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.harness.lm_suite import tuned
from benchmarks.harness.plots import pyplot
from benchmarks.harness.records import read_jsonl, write_results
from benchmarks.harness.stats import at_cost, mean, sd

MARGIN = 0.05  # nats/byte by which top-k must beat random
PAIRS = [(f"topk-{k}-{layout}", f"random-{k}-{layout}") for k in (0.5, 0.25) for layout in ("shrink", "fixed")]
NOISE_AVOIDING = ("reducible-0.5-shrink", "rank-0.5-shrink", "cache-s2-observe-0.5-shrink", "topk-0.5-shrink")


def curve(run: dict[str, Any], axis: str) -> list[tuple[float, float]]:
    return [(p[axis], p["val_loss"]) for p in run["curve"]]


def gap(worse: dict[str, Any], better: dict[str, Any], axis: str) -> float | None:
    """``worse``'s validation loss minus ``better``'s at the smaller of their final ``axis`` values."""
    x = min(worse["curve"][-1][axis], better["curve"][-1][axis])
    a, b = at_cost(curve(worse, axis), x), at_cost(curve(better, axis), x)
    return None if a is None or b is None else a - b


def reach(run: dict[str, Any], target: float, axis: str) -> float | None:
    """The ``axis`` value where ``run``'s curve first gets down to ``target`` (interpolated), or None."""
    points = curve(run, axis)
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if y1 <= target:
            if y1 == target or y0 == y1:  # exact: the interpolation below can round a hit on x1 to x1 - 1 ulp
                return x1
            return x0 + (x1 - x0) * (y0 - target) / (y0 - y1)
    return None


def index(runs: list[dict[str, Any]]) -> dict[tuple[str, str, float, int], dict[str, Any]]:
    return {(r["regime"], r["arm"], r["fraction"], r["seed"]): r for r in runs}


def arm_rows(runs: list[dict[str, Any]], regime: str) -> list[dict[str, Any]]:
    """One row per (arm, budget): seed means of the final numbers."""
    rows, seen = [], []
    for r in runs:
        if r["regime"] == regime and (r["arm"], r["fraction"]) not in seen:
            seen.append((r["arm"], r["fraction"]))
    reference = None
    for arm, fraction in sorted(seen, key=lambda k: (k[1], k[0] != "baseline", k[0])):
        group = [r for r in runs if r["regime"] == regime and r["arm"] == arm and r["fraction"] == fraction]
        vals = [r["val_loss"] for r in group]
        row = {
            "arm": arm,
            "fraction": fraction,
            "seeds": len(group),
            "val_loss": mean(vals),
            "val_sd": sd(vals),
            "fe": mean([r["fe"] / r["budget_fe"] * fraction for r in group]),
            "seconds": mean([r["seconds"] for r in group]),
            "tokens_per_second": mean([r["trained_tokens_per_second"] for r in group]),
            "noisy_share": mean([r["noisy_share"] for r in group]),
            "data_noisy_share": mean([r["data_noisy_share"] for r in group]),
            "epochs_read": mean([r["epochs_read"] for r in group]),
            "steps": mean([r["steps"] for r in group]),
            "reused": mean(
                [r["sequences_reused"] / max(1, r["sequences_reused"] + r["sequences_scored"]) for r in group]
            ),
        }
        if arm == "baseline" and fraction == max(f for _, f in seen):
            reference = row
        rows.append(row)
    for row in rows:
        row["seconds_ratio"] = row["seconds"] / reference["seconds"] if reference else None
    return rows


def topk_vs_random(runs: list[dict[str, Any]], regime: str) -> list[dict[str, Any]]:
    """Per pair and budget: random's loss minus top-k's, per seed, at equal FE and at equal seconds."""
    table, by = [], index(runs)
    fractions = sorted({r["fraction"] for r in runs if r["regime"] == regime})
    seeds = sorted({r["seed"] for r in runs if r["regime"] == regime})
    for topk, random_ in PAIRS:
        for fraction in fractions:
            pairs = [(by.get((regime, topk, fraction, s)), by.get((regime, random_, fraction, s))) for s in seeds]
            pairs = [(a, b) for a, b in pairs if a and b]
            if not pairs:
                continue
            fe = [gap(b, a, "fe") for a, b in pairs]
            sec = [gap(b, a, "seconds") for a, b in pairs]
            ok = all(v is not None and v >= MARGIN for v in fe + sec)
            table.append({"topk": topk, "random": random_, "fraction": fraction, "fe": fe, "seconds": sec, "met": ok})
    return table


def time_to_baseline(runs: list[dict[str, Any]], regime: str) -> list[dict[str, Any]]:
    """Per arm: seconds and FE to reach the tuned baseline's final validation loss at the largest budget, relative
    to the baseline's, per seed (the same seed's baseline), then the seed mean and the worst seed.

    An arm reaches the target at the earliest of: inside its largest-budget run (interpolated between evaluations),
    or along its budget curve (the start, then each budget's final point), where a smaller budget that annealed
    earlier may get there first. None where a seed never reached it.
    """
    fractions = sorted({r["fraction"] for r in runs if r["regime"] == regime})
    by = index(runs)
    seeds = sorted({r["seed"] for r in runs if r["regime"] == regime})
    out = []
    for arm in sorted({r["arm"] for r in runs if r["regime"] == regime}):
        ratios: dict[str, list[float | None]] = {"seconds": [], "fe": []}
        for seed in seeds:
            base = by.get((regime, "baseline", fractions[-1], seed))
            budgets = [by[(regime, arm, f, seed)] for f in fractions if (regime, arm, f, seed) in by]
            if not base or not budgets:
                continue
            for axis in ratios:
                start = budgets[0]["curve"][0]
                finals = {"curve": [start] + [b["curve"][-1] for b in budgets]}
                found = [
                    x
                    for x in (reach(budgets[-1], base["val_loss"], axis), reach(finals, base["val_loss"], axis))
                    if x is not None
                ]
                ratios[axis].append(min(found) / base[axis] if found else None)
        row: dict[str, Any] = {
            "arm": arm,
            "seeds_reached": f"{sum(v is not None for v in ratios['seconds'])}/{len(ratios['seconds'])}",
        }
        for axis, values in ratios.items():
            complete = bool(values) and all(v is not None for v in values)
            row[f"{axis}_ratio"] = statistics.fmean(values) if complete else None  # type: ignore[arg-type]
            row[f"{axis}_worst"] = max(values) if complete else None  # type: ignore[type-var]
        out.append(row)
    return out


def noise_avoiding(runs: list[dict[str, Any]], regime: str, comparisons: list[dict[str, Any]]) -> list[dict]:
    """Arms whose noisy share is within 1.2x of the data's and that beat ``random`` at the same keep and layout
    (at equal FE, every seed, every budget)."""
    by, out = index(runs), []
    fractions = sorted({r["fraction"] for r in runs if r["regime"] == regime})
    seeds = sorted({r["seed"] for r in runs if r["regime"] == regime})
    for arm in sorted({r["arm"] for r in runs if r["regime"] == regime}):
        parts = arm.split("-")
        if len(parts) < 3 or arm.startswith(("random", "prune")):
            continue
        control = f"random-{parts[-2]}-{parts[-1]}"
        gaps, shares = [], []
        for fraction in fractions:
            for seed in seeds:
                a, b = by.get((regime, arm, fraction, seed)), by.get((regime, control, fraction, seed))
                if a and b:
                    gaps.append(gap(b, a, "fe"))
                    shares.append(a["noisy_share"] / a["data_noisy_share"])
        if gaps:
            within = max(shares) <= 1.2
            beats = all(g is not None and g > 0 for g in gaps)
            out.append(
                {
                    "arm": arm,
                    "control": control,
                    "max_noisy_ratio": max(shares),
                    "min_gap": min(gaps),
                    "met": within and beats,
                }
            )
    return out


def _f(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def tables(summary: dict[str, Any]) -> str:
    lines = []
    for regime, part in summary["regimes"].items():
        t = part["tuning"]
        lines += [
            f"## {regime}",
            "",
            f"Tuned baseline: batch {t['batch']}, LR {t['lr']:g} (grid batches {t['batches']},"
            f" LRs {t['lrs']}; best inside the grid: {t['inside']}).",
            "",
        ]
        lines += [
            "| arm | budget | val nats/byte (mean ± sd) | FE (x ref) | seconds | x baseline s | trained tok/s |"
            " noisy share (data) | epochs read | steps | reused |",
            "|" + " --- |" * 11,
        ]
        for r in part["arms"]:
            lines.append(
                f"| {r['arm']} | {r['fraction']} | {_f(r['val_loss'])} ± {_f(r['val_sd'])} | {_f(r['fe'], 2)} | "
                f"{_f(r['seconds'], 1)} | {_f(r['seconds_ratio'], 2)} | {_f(r['tokens_per_second'], 0)} | "
                f"{_f(r['noisy_share'])} ({_f(r['data_noisy_share'])}) | {_f(r['epochs_read'], 2)} | "
                f"{_f(r['steps'], 0)} | {_f(r['reused'], 2)} |"
            )
        lines += [
            "",
            "Top-k against random at the same keep and layout (random minus top-k, nats/byte, per seed):",
            "",
            "| pair | budget | equal FE | equal seconds | >= 0.05 on every seed |",
            "| --- | --- | --- | --- | --- |",
        ]
        for c in part["topk_vs_random"]:
            lines.append(
                f"| {c['topk']} vs {c['random']} | {c['fraction']} | {', '.join(_f(v) for v in c['fe'])} | "
                f"{', '.join(_f(v) for v in c['seconds'])} | {'yes' if c['met'] else 'no'} |"
            )
        lines += [
            "",
            "Reaching the tuned baseline's final validation loss (seed mean [worst seed], x the baseline's):",
            "",
            "| arm | seconds (x baseline) | FE (x baseline) | seeds reached |",
            "| --- | --- | --- | --- |",
        ]
        for r in part["time_to_baseline"]:
            lines.append(
                f"| {r['arm']} | {_f(r['seconds_ratio'], 2)} [{_f(r['seconds_worst'], 2)}] | "
                f"{_f(r['fe_ratio'], 2)} [{_f(r['fe_worst'], 2)}] | {r['seeds_reached']} |"
            )
        lines += [
            "",
            "Noise-like share within 1.2x of the data's while beating random (equal FE, every seed/budget):",
            "",
            "| arm | control | max noisy share / data's | smallest gap to random | met |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in part["noise_avoiding"]:
            lines.append(
                f"| {r['arm']} | {r['control']} | {_f(r['max_noisy_ratio'], 2)} | {_f(r['min_gap'])} | "
                f"{'yes' if r['met'] else 'no'} |"
            )
        lines.append("")
    return "\n".join(lines)


def tuning(records: list[dict[str, Any]], regime: str) -> dict[str, Any]:
    """:func:`tuned`, with whether the best point is inside the grid and every grid point's loss."""
    best = tuned(records, regime)
    if best is None:
        raise ValueError(f"no tuning run of regime {regime!r} in tune.jsonl: run `python -m benchmarks lm tune` first")
    b, lr, batches, lrs = best["batch"], best["lr"], best["batches"], best["lrs"]
    inside = batches[0] < b < batches[-1] and lrs[0] < lr < lrs[-1]
    rows = [r for r in records if r["regime"] == regime]
    grid = {f"b={r['config']['batch']} lr={r['config']['lr']:g}": round(r["val_loss"], 4) for r in rows}
    return {**best, "inside": inside, "grid": grid}


def report(out: Path, wall_seconds: float | None = None) -> dict[str, Any]:
    runs, tune = read_jsonl(out / "runs.jsonl"), read_jsonl(out / "tune.jsonl")
    wall = out / "wall.json"  # written by ``lm all``, so a later ``report`` still says how long the command took
    if wall_seconds is not None:
        wall.write_text(json.dumps({"wall_seconds": wall_seconds}))
    elif wall.exists():
        wall_seconds = json.loads(wall.read_text())["wall_seconds"]
    summary: dict[str, Any] = {"regimes": {}, "wall_seconds": wall_seconds}
    machine = out / "machine.json"
    if machine.exists():
        summary["machine"] = json.loads(machine.read_text())
    for regime in ("single-pass", "repeating"):
        if not any(r["regime"] == regime for r in runs):
            continue
        comparisons = topk_vs_random(runs, regime)
        summary["regimes"][regime] = {
            "tuning": tuning(tune, regime),
            "arms": arm_rows(runs, regime),
            "topk_vs_random": comparisons,
            "time_to_baseline": time_to_baseline(runs, regime),
            "noise_avoiding": noise_avoiding(runs, regime, comparisons),
        }
    text = tables(summary)
    if wall_seconds is not None:
        text += f"\nWall time of the whole command: {wall_seconds / 60:.1f} min.\n"
    write_results(out, summary, text)
    plot(runs, out)
    return summary


def styles(arms: list[str]) -> dict[str, tuple[str, str]]:
    """Baseline black, the random controls grey and dotted, every other arm its own colour."""
    palette = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")
    out, colored = {}, 0
    for arm in arms:
        if arm == "baseline":
            out[arm] = ("black", "-")
        elif "random" in arm:
            out[arm] = ("0.6" if "fixed" in arm else "0.35", ":" if arm.startswith("random") else "-.")
        else:
            out[arm] = (palette[colored % len(palette)], "--" if "fixed" in arm else "-")
            colored += 1
    return out


def plot(runs: list[dict[str, Any]], out: Path) -> Path | None:
    """``lm.png``: validation loss against seconds and FE at the largest budget (seed means), per regime, and the
    noise-like share of what each arm trained on."""
    plt = pyplot(out)
    if plt is None:
        return None
    regimes = [g for g in ("single-pass", "repeating") if any(r["regime"] == g for r in runs)]
    style = styles(sorted({r["arm"] for r in runs}, key=lambda a: (a != "baseline", a)))  # one colour per arm
    fig, axes = plt.subplots(len(regimes), 3, figsize=(18, 5 * len(regimes)), squeeze=False)
    for row, regime in enumerate(regimes):
        mine = [r for r in runs if r["regime"] == regime]
        top = max(r["fraction"] for r in mine)
        arms = sorted({r["arm"] for r in mine}, key=lambda a: (a != "baseline", a))
        for col, axis in enumerate(("seconds", "fe")):
            ax = axes[row][col]
            for arm in arms:
                group = [r for r in mine if r["arm"] == arm and r["fraction"] == top]
                evals = list(zip(*(g["curve"] for g in group), strict=False))  # the seeds' n-th points together
                xs = [statistics.fmean(p[axis] for p in points) for points in evals]
                ys = [statistics.fmean(p["val_loss"] for p in points) for points in evals]
                color, dash = style[arm]
                ax.plot(xs[1:], ys[1:], color=color, linestyle=dash, marker=".", label=arm)
            ax.set_xlabel("CPU seconds" if axis == "seconds" else "forward-equivalents (sequences)")
            ax.set_ylabel("validation nats/byte")
            ax.set_title(f"{regime}: largest budget, mean of seeds")
            ax.grid(alpha=0.3)
        axes[row][0].legend(fontsize=7)
        ax = axes[row][2]
        shares = [
            statistics.fmean(r["noisy_share"] for r in mine if r["arm"] == a and r["fraction"] == top) for a in arms
        ]
        ax.barh(arms, shares, color=[style[a][0] for a in arms])
        ax.axvline(statistics.fmean(r["data_noisy_share"] for r in mine), color="black", linestyle="--")
        ax.set_xlabel("noise-like share of trained sequences (dashed: the data's)")
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    path = out / "lm.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
