"""PNG plots of a suite (matplotlib, from the ``bench`` extra; skipped with a note when it is missing)."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path
from typing import Any

from ._report import group

STYLE = {"baseline": ("black", "-"), "baseline-small-batch": ("0.45", "--"), "random": ("tab:gray", ":")}


def _style(arm: str, index: int) -> tuple[Any, str]:
    if arm in STYLE:
        return STYLE[arm]
    import matplotlib

    return matplotlib.colormaps["tab10"](index % 10), "-"


def suite_plots(records: list[dict[str, Any]], summary: dict[str, Any], out: Path) -> list[Path]:
    """``accuracy_vs_cost.png`` (final accuracy of each budget against FE and seconds, seed spread as a band) and
    ``curves.png`` (test accuracy inside each arm's largest-budget run, seed mean)."""
    if importlib.util.find_spec("matplotlib") is None:
        (out / "PLOTS_SKIPPED.txt").write_text("matplotlib is not installed: pip install -e '.[bench]'\n")
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = group(records)
    ref = summary["reference_cost"]
    target = 100 * summary["target_accuracy"]
    finals = [100 * r["accuracy"] for r in records]
    low = max(min(finals), target - 2.5)
    high = max(finals) + 0.15
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    for i, (arm, by_epochs) in enumerate(arms.items()):
        color, dash = _style(arm, i)
        for ax, axis in zip(axes, ("fe", "seconds"), strict=True):
            xs, mids, lows, highs = [], [], [], []
            for runs in by_epochs.values():
                accs = [100 * r["accuracy"] for r in runs]
                costs = [r[axis] for r in runs]
                xs.append((statistics.fmean(costs) if axis == "fe" else statistics.median(costs)) / ref[axis])
                mids.append(statistics.fmean(accs))
                lows.append(min(accs))
                highs.append(max(accs))
            ax.plot(xs, mids, dash, color=color, marker="o", ms=3, lw=1.4, label=arm)
            ax.fill_between(xs, lows, highs, color=color, alpha=0.12, lw=0)
    for ax, what in zip(axes, ("forward-equivalents", "wall-clock seconds (median over seeds)"), strict=True):
        ax.axhline(target, color="black", lw=0.8, ls=(0, (4, 4)))
        ax.axvline(1.0, color="black", lw=0.5, alpha=0.4)
        ax.set_xlabel(f"{what}, x the baseline's at {summary['reference_epochs']} epochs")
        ax.set_ylim(low, high)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%) at the end of an annealed run")
    axes[0].set_title("accuracy vs compute (each point: one budget; band: min-max over seeds)", fontsize=9)
    axes[1].set_title("accuracy vs time (torch on 1 thread, shared 2-core machine)", fontsize=9)
    axes[1].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{records[0]['suite']}: {records[0]['samples']:,} samples, {records[0]['family']}", fontsize=11)
    fig.tight_layout()
    paths = [out / "accuracy_vs_cost.png"]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.8))
    for i, (arm, by_epochs) in enumerate(arms.items()):
        color, dash = _style(arm, i)
        runs = by_epochs[max(by_epochs)]
        points = list(zip(*(r["curve"] for r in runs), strict=True))
        xs = [statistics.fmean(p["fe"] for p in pts) / ref["fe"] for pts in points]
        ys = [100 * statistics.fmean(p["accuracy"] for p in pts) for pts in points]
        ax.plot(xs, ys, dash, color=color, marker=".", lw=1.2, label=f"{arm} ({max(by_epochs)} ep)")
    ax.axhline(target, color="black", lw=0.8, ls=(0, (4, 4)))
    ax.set_ylim(low, high)
    ax.set_xlabel("forward-equivalents, x the baseline's reference run")
    ax.set_ylabel("test accuracy (%) during the run")
    ax.set_title("inside each arm's largest-budget run (seed mean)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    paths.append(out / "curves.png")
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths
