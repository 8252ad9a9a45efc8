"""PNG plots of a suite (matplotlib, from the ``bench`` extra; skipped with a note when it is missing)."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path
from typing import Any

from .stats import group

STYLE = {"baseline": ("black", "-"), "baseline-small-batch": ("0.35", "--"), "random": ("0.55", ":")}
NAMED = {  # the same colour for an arm in every suite
    "composer": "tab:red",
    "topk": "tab:purple",
    "rank": "tab:brown",
    "history": "tab:pink",
    "topk-shrink": "tab:blue",
    "sbdata-default": "tab:orange",
    "reducible": "tab:green",
    "reducible-fixed": "tab:cyan",
}
CACHE_COLORS = {"1": "tab:olive", "2": "tab:red", "4": "tab:purple"}
COLORS = ("tab:olive", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:blue", "tab:orange", "tab:green")


def pyplot(out: Path | None = None) -> Any:
    """matplotlib's ``pyplot`` on the Agg backend, or None without matplotlib (the ``bench`` extra); ``out``: the
    folder that then gets a ``PLOTS_SKIPPED.txt`` note."""
    if importlib.util.find_spec("matplotlib") is None:
        if out is not None:
            (out / "PLOTS_SKIPPED.txt").write_text("matplotlib is not installed: pip install -e '.[bench]'\n")
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _styles(arms: list[str]) -> dict[str, tuple[Any, str]]:
    """Controls in greys, selection arms in colours (fixed per known arm, cycling for others)."""
    out, colored = {}, 0
    for arm in arms:
        if arm.startswith("cache-s"):  # the loss-cache arms: a colour per staleness, dashed with observe()
            staleness = arm.removeprefix("cache-s").split("-")[0]
            out[arm] = (CACHE_COLORS.get(staleness, "tab:gray"), "--" if arm.endswith("-observe") else "-")
        elif arm in STYLE or arm in NAMED:
            out[arm] = STYLE.get(arm) or (NAMED[arm], "-")
        else:
            out[arm] = (COLORS[colored % len(COLORS)], "-")
            colored += 1
    return out


def _seconds(summary: dict[str, Any], arm: str, runs: list[dict[str, Any]]) -> float | None:
    """Interleaved-timing seconds of a budget (epochs x seconds per epoch + up front), if measured."""
    row = summary["arms"][arm]
    if "timed_seconds_per_epoch" not in row:
        return None
    return runs[0]["epochs"] * row["timed_seconds_per_epoch"] + row["timed_upfront_seconds"]


def suite_plots(records: list[dict[str, Any]], summary: dict[str, Any], out: Path) -> list[Path]:
    """``accuracy_vs_cost.png`` (final accuracy of each budget against FE and seconds, seed spread as a band) and
    ``curves.png`` (test accuracy inside each arm's largest-budget run, seed mean)."""
    plt = pyplot(out)
    if plt is None:
        return []
    arms = group(records)
    ref = summary["reference_cost"]
    target = 100 * summary["target_accuracy"]
    finals = [100 * r["accuracy"] for r in records]
    low = max(min(finals), target - 2.5)
    high = max(finals) + 0.15
    styles = _styles(list(arms))
    timed = "timed_reference_seconds" in summary
    panels = ("fe", "timed", "seconds") if timed else ("fe", "seconds")
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5.2), sharey=True)
    for arm, by_epochs in arms.items():
        color, dash = styles[arm]
        for ax, axis in zip(axes, panels, strict=True):
            xs, mids, lows, highs = [], [], [], []
            for runs in by_epochs.values():
                accs = [100 * r["accuracy"] for r in runs]
                if axis == "timed":
                    xs.append(_seconds(summary, arm, runs) / summary["timed_reference_seconds"])
                else:
                    costs = [r[axis] for r in runs]
                    xs.append((statistics.fmean(costs) if axis == "fe" else statistics.median(costs)) / ref[axis])
                mids.append(statistics.fmean(accs))
                lows.append(min(accs))
                highs.append(max(accs))
            ax.plot(xs, mids, dash, color=color, marker="o", ms=3, lw=1.4, label=arm)
            ax.fill_between(xs, lows, highs, color=color, alpha=0.12, lw=0)
    whats = {"fe": "forward-equivalents", "timed": "seconds from interleaved step timing", "seconds": "raw seconds"}
    for ax, what in zip(axes, (whats[p] for p in panels), strict=True):
        ax.axhline(target, color="black", lw=0.8, ls=(0, (4, 4)))
        ax.axvline(1.0, color="black", lw=0.5, alpha=0.4)
        ax.set_xlabel(f"{what}, x the baseline's at {summary['reference_epochs']} epochs")
        ax.set_ylim(low, high)
        ax.grid(alpha=0.3)
    below = [f"{arm} ({100 * summary['arms'][arm]['final_accuracy']:.1f}%)" for arm in arms
             if 100 * summary["arms"][arm]["final_accuracy"] < low]  # fmt: skip
    if below:
        axes[0].text(0.02, 0.02, "below the axis: " + ", ".join(below), transform=axes[0].transAxes, fontsize=8)
    axes[0].set_ylabel("test accuracy (%) at the end of an annealed run")
    axes[0].set_title("accuracy vs compute (each point: one budget; band: min-max over seeds)", fontsize=9)
    if timed:
        axes[1].set_title("accuracy vs time: epochs x interleaved seconds per epoch (throughput benchmark)", fontsize=9)
    axes[-1].set_title("accuracy vs raw run seconds (median over seeds; shared 2-core machine, noisy)", fontsize=9)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{records[0]['suite']}: {records[0]['samples']:,} samples, {records[0]['family']}", fontsize=11)
    fig.tight_layout()
    paths = [out / "accuracy_vs_cost.png"]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.8))
    for arm, by_epochs in arms.items():
        color, dash = styles[arm]
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
