"""The reading of ``benchmarks/auto/run.py``: per suite, seconds to the user's and the tuned recipe's accuracy,
accuracy at equal seconds, the controller's predicted against its measured speed-up, the issue's targets (stated in
``benchmarks/auto/README.md``, and below in ``auto_targets``), and the decisions plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from benchmarks.harness.plots import pyplot
from benchmarks.harness.records import read_jsonl, write_results
from benchmarks.harness.stats import at_cost, curve, mean, or_never, sd, seconds_to

SUITES = ("cnn100k", "mlp100k", "noisy100k")
AUTO_ARMS = ("auto", "auto-topk")  # the keep="auto" arms: on importance by gradnorm, and with every default
SIGNAL = ("importance-gradnorm-0.25", "importance-0.25", "topk-0.25", "random-0.25")


def accuracy_at(run: dict[str, Any], seconds: float) -> float:
    """A run's test accuracy at ``seconds`` (its final accuracy if it ended sooner)."""
    value = at_cost(curve(run), seconds)
    if value is None:
        return run["accuracy"] if seconds >= run["seconds"] else curve(run)[0][1]
    return value


def suite_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    arms: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        arms.setdefault(record["arm"], []).append(record)
    user, tuned = arms.get("user", []), arms.get("tuned", [])
    user_acc = [r["accuracy"] for r in user]
    user_target, user_seconds = mean(user_acc), mean([r["seconds"] for r in user])
    tuned_target = mean([r["accuracy"] for r in tuned]) - sd([r["accuracy"] for r in tuned])
    tuned_seconds = mean([r["seconds"] for r in tuned])
    rows = {}
    for name, runs in arms.items():
        to_user, to_tuned = seconds_to(runs, user_target), seconds_to(runs, tuned_target)
        rows[name] = {
            "seeds": len(runs),
            "accuracy_mean": mean([r["accuracy"] for r in runs]),
            "accuracy_sd": sd([r["accuracy"] for r in runs]),
            "seconds_mean": mean([r["seconds"] for r in runs]),
            "fe_mean": mean([r["fe"] for r in runs]),
            "at_user_seconds": mean([accuracy_at(r, user_seconds) for r in runs]),
            "to_user_x": None if to_user is None else to_user / user_seconds,
            "to_tuned_x": None if to_tuned is None else to_tuned / tuned_seconds,
            "noisy_share": mean([r["noisy_share"] for r in runs]) if runs[0].get("noisy_share") is not None else None,
        }
        if "auto" in runs[0]:
            by_seed = {r["seed"]: r["accuracy"] for r in user}
            rows[name]["same_as_user"] = all(by_seed.get(r["seed"]) == r["accuracy"] for r in runs)
            decisions = [d for r in runs for d in r["auto"]["history"]]
            on = [d[4] for d in decisions if d[1] and math.isfinite(d[4])]  # NaN: on where plain made no progress
            rows[name]["on_share"] = mean([r["auto"]["on_share"] for r in runs])
            rows[name]["trial_share"] = mean([r["auto"].get("trial_share") or 0.0 for r in runs])  # 0: no trials
            rows[name]["predicted_speedup"] = mean(on) if on else 1.0
            rows[name]["measured_speedup"] = None if to_user is None else user_seconds / to_user
            rows[name]["reasons"] = sorted({r["auto"]["reason"] for r in runs if r["auto"]["reason"]})
    present = [name for name in SIGNAL if name in arms]
    equal = min((rows[name]["seconds_mean"] for name in present), default=None)
    signal = {}
    if equal is not None:
        for name in present:
            signal[name] = [accuracy_at(r, equal) for r in sorted(arms[name], key=lambda r: r["seed"])]
    return {
        "user_target": user_target,
        "user_sd": sd(user_acc),
        "user_seconds": user_seconds,
        "tuned_target": tuned_target,
        "tuned_seconds": tuned_seconds,
        "arms": rows,
        "equal_seconds": equal,
        "at_equal_seconds": signal,
    }


LM_SIGNAL = ("importance-gradnorm-0.5-shrink", "importance-0.5-shrink", "topk-0.5-shrink", "random-0.5-shrink")


def val_at(run: dict[str, Any], seconds: float) -> float:
    """A language-model run's validation loss (nats/byte) at ``seconds`` (its final loss if it ended sooner)."""
    points = [(p["seconds"], p["val_loss"]) for p in run["curve"]]
    value = at_cost(points, seconds)
    return run["val_loss"] if value is None else value


def lm_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per regime: each arm's final loss, seconds, and gap to the baseline at equal seconds (per seed: the loss of
    both at the shorter run's seconds), and ``auto``'s decisions."""
    out: dict[str, Any] = {}
    for regime in sorted({r["regime"] for r in records}):
        rows = [r for r in records if r["regime"] == regime and r["fraction"] == 1.0]
        base = {r["seed"]: r for r in rows if r["arm"] == "baseline"}
        arms: dict[str, Any] = {}
        for name in dict.fromkeys(r["arm"] for r in rows):
            runs = [r for r in rows if r["arm"] == name]
            gaps = []
            for run in runs:
                other = base.get(run["seed"])
                if other is not None:
                    at = min(run["seconds"], other["seconds"])
                    gaps.append(val_at(run, at) - val_at(other, at))
            arms[name] = {
                "val_loss_mean": mean([r["val_loss"] for r in runs]),
                "val_loss_sd": sd([r["val_loss"] for r in runs]),
                "seconds_mean": mean([r["seconds"] for r in runs]),
                "gap_at_equal_seconds": mean(gaps) if gaps else None,
                "gaps": gaps,
            }
            if "auto" in runs[0]:
                arms[name]["on_share"] = mean([r["auto"]["on_share"] for r in runs])
                arms[name]["reasons"] = sorted({r["auto"]["reason"] for r in runs if r["auto"]["reason"]})
        out[regime] = arms
    return out


def auto_targets(name: str, arm: str, suite: dict[str, Any], timing: dict[str, Any] | None) -> dict[str, str]:
    """The targets that concern one ``keep="auto"`` arm of suite ``name``."""
    out: dict[str, str] = {}
    auto = suite["arms"][arm]
    floor = suite["user_target"] - suite["user_sd"]
    to_user = auto["to_user_x"]
    wall = f"wall: {100 * auto['at_user_seconds']:.2f}% at the user's seconds (floor {100 * floor:.2f}%), the " + (
        f"user's accuracy in {or_never(to_user)}"
    )
    if auto["same_as_user"] and auto["on_share"] == 0 and auto.get("trial_share", 0) == 0 and timing is not None:
        # stayed off and trained exactly as the user's recipe: its seconds are the user's times the per-step cost of
        # being off, which the interleaved timing measures (per-run wall seconds vary by +-15% here)
        ratio = timing["ratio"]
        out[f"{name}: {arm} never loses"] = (
            f"{'met' if ratio <= 1.03 else 'missed'}: stayed off, the user's accuracy on every seed, at "
            f"{ratio:.3f}x the seconds (interleaved step timing; {wall})"
        )
    else:
        ok = auto["at_user_seconds"] >= floor and to_user is not None and to_user <= 1.03
        out[f"{name}: {arm} never loses"] = f"{'met' if ok else 'missed'}: {wall}"
    topk = suite["arms"].get("topk-0.25", {}).get("to_user_x")
    if name != "mlp100k":
        met = to_user is not None and topk is not None and to_user <= 1.10 * topk
        out[f"{name}: {arm} captures top-k's win"] = (
            f"{'met' if met else 'missed'}: {arm} {or_never(to_user)}, top-k 0.25 "
            f"{or_never(topk)} of the user's seconds"
        )
    measured = auto.get("measured_speedup")
    if measured:
        error = auto["predicted_speedup"] / measured - 1
        out[f"{name}: {arm} estimate within 15%"] = (
            f"{'met' if abs(error) <= 0.15 else 'missed'}: predicted {auto['predicted_speedup']:.2f}x, measured "
            f"{measured:.2f}x ({100 * error:+.0f}%)"
        )
    else:
        out[f"{name}: {arm} estimate within 15%"] = f"unmeasured: {arm} never reached the user's accuracy"
    return out


def targets(summary: dict[str, Any], timing: dict[str, Any] | None) -> dict[str, str]:
    """Each target of the issue as "met"/"missed"/"unmeasured" with the numbers behind it."""
    out: dict[str, str] = {}
    for name, suite in summary["suites"].items():
        for arm in AUTO_ARMS:
            if arm in suite["arms"]:
                out.update(auto_targets(name, arm, suite, timing))
        contenders = (*AUTO_ARMS, "importance-gradnorm-0.25")
        best = {a: suite["arms"][a]["to_tuned_x"] for a in contenders if a in suite["arms"]}
        reached = [v for v in best.values() if v is not None]
        out[f"{name}: tuned accuracy - sd in <= 0.8x its seconds"] = (
            f"{'met' if reached and min(reached) <= 0.8 else 'missed'}: "
            + ", ".join(f"{a} {or_never(v)}" for a, v in best.items())
        )
    for regime, arms in (summary.get("lm") or {}).items():
        auto, base = arms.get("auto"), arms.get("baseline")
        if auto is None or base is None or auto["gap_at_equal_seconds"] is None:
            continue
        gap = auto["gap_at_equal_seconds"]
        fixed = [arms[a]["gap_at_equal_seconds"] for a in ("topk-0.5-shrink", "random-0.5-shrink") if a in arms]
        out[f"LM {regime}: auto within 0.02 nats/byte of the baseline at equal seconds"] = (
            f"{'met' if gap <= 0.02 else 'missed'}: {gap:+.3f} (fixed top-k/random 0.5: "
            + ", ".join("n/a" if g is None else f"{g:+.3f}" for g in fixed)
            + ")"
        )
    if timing is not None:
        ratio, rounds = timing["ratio"], sorted(timing["ratio_per_round"])
        middle = rounds[len(rounds) // 2]
        out["cheap when off (ConvNet)"] = (
            f"{'met' if ratio <= 1.02 else 'missed'}: {ratio:.3f}x a plain loop's step (ratio of the medians; per "
            f"round: median {middle:.3f}, range {rounds[0]:.3f}-{rounds[-1]:.3f}, {len(rounds)} rounds)"
            + (
                ""
                if "ratio_weighted" not in timing
                else f"; on weighted importance by gradnorm: {timing['ratio_weighted']:.3f}x"
            )
        )
    return out


def table(summary: dict[str, Any]) -> str:
    lines = []
    for name, suite in summary["suites"].items():
        lines += [
            f"## {name}",
            "",
            f"User recipe: {100 * suite['user_target']:.2f}% (sd {100 * suite['user_sd']:.2f}) in "
            f"{suite['user_seconds']:.1f} s; tuned: {100 * suite['tuned_target']:.2f}% (final - sd) in "
            f"{suite['tuned_seconds']:.1f} s.",
            "",
            "| arm | accuracy | seconds | at the user's seconds | to the user's accuracy | to tuned - sd | noisy |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for arm, row in suite["arms"].items():
            noisy = "" if row["noisy_share"] is None else f"{100 * row['noisy_share']:.1f}%"
            lines.append(
                f"| {arm} | {100 * row['accuracy_mean']:.2f} ± {100 * row['accuracy_sd']:.2f} | "
                f"{row['seconds_mean']:.1f} | {100 * row['at_user_seconds']:.2f} | {or_never(row['to_user_x'])} | "
                f"{or_never(row['to_tuned_x'])} | {noisy} |"
            )
        for arm in AUTO_ARMS:
            auto = suite["arms"].get(arm)
            if auto is None:
                continue
            same = "; final accuracy identical to the user's on every seed" if auto["same_as_user"] else ""
            lines += ["", f"{arm}: on for {100 * auto['on_share']:.0f}% of the batches; predicted "
                      f"{auto['predicted_speedup']:.2f}x, measured {or_never(auto['measured_speedup'])}"
                      f"{same}"]  # fmt: skip
            lines += [f"- said: {reason}" for reason in auto["reasons"]]
        if suite["at_equal_seconds"]:
            lines += ["", f"At equal seconds ({suite['equal_seconds']:.1f} s), per seed:"]
            lines += [f"- {arm}: " + ", ".join(f"{100 * a:.2f}" for a in accs)
                      for arm, accs in suite["at_equal_seconds"].items()]  # fmt: skip
        lines.append("")
    for regime, arms in (summary.get("lm") or {}).items():
        lines += [f"## LM {regime} (validation nats/byte at the tuned baseline's FE)", ""]
        lines += ["| arm | nats/byte | seconds | minus the baseline at equal seconds |", "| --- | --- | --- | --- |"]
        for arm, row in arms.items():
            gap = row["gap_at_equal_seconds"]
            lines.append(
                f"| {arm} | {row['val_loss_mean']:.3f} ± {row['val_loss_sd']:.3f} | {row['seconds_mean']:.1f} | "
                + ("" if gap is None else f"{gap:+.3f}")
                + " |"
            )
        if "auto" in arms and "on_share" in arms["auto"]:
            lines += ["", f"auto: on for {100 * arms['auto']['on_share']:.0f}% of the batches"]
            lines += [f"- said: {reason}" for reason in arms["auto"]["reasons"]]
        lines.append("")
    lines += ["## Targets", ""] + [f"- {name}: {verdict}" for name, verdict in summary["targets"].items()]
    return "\n".join(lines) + "\n"


def plot_decisions(out: Path, records: dict[str, list[dict[str, Any]]]) -> Path | None:
    """The controller's tau, predicted speed-up and on/off over training, per suite (seeds overlaid)."""
    plt = pyplot()
    if plt is None:
        return None
    suites = [name for name in records if any("auto" in r for r in records[name])]
    if not suites:
        return None
    fig, axes = plt.subplots(1, len(suites), figsize=(5 * len(suites), 3.6), squeeze=False)
    for ax, name in zip(axes[0], suites, strict=True):
        for run in (r for r in records[name] if "auto" in r):
            history, style = run["auto"]["history"], "-" if run["arm"] == "auto" else "--"
            if not history:
                continue
            total = max(d[0] for d in history) or 1
            steps = [d[0] / total for d in history]
            ax.plot(steps, [d[3] for d in history], style, color="tab:blue", alpha=0.7, label=f"{run['arm']}: tau")
            ax.plot(steps, [d[4] for d in history], style, color="tab:red", alpha=0.7,
                    label=f"{run['arm']}: predicted speed-up")  # fmt: skip
            ax.fill_between(steps, 0, [d[1] for d in history], step="post", color="tab:green", alpha=0.08)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_title(f"{name}: keep='auto' decisions (green: on)")
        ax.set_xlabel("share of training")
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(
            dict(zip(labels, handles, strict=False)).values(), dict(zip(labels, handles, strict=False)), fontsize=8
        )
    fig.tight_layout()
    path = out / "decisions.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(out: Path, wall_seconds: float | None = None) -> dict[str, Any]:
    records = {name: read_jsonl(out / name / "runs.jsonl") for name in SUITES}
    records = {name: runs for name, runs in records.items() if runs}
    timing_path = out / "timing" / "summary.json"
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else None
    summary: dict[str, Any] = {"suites": {name: suite_summary(runs) for name, runs in records.items()}}
    lm_runs = read_jsonl(out / "lm" / "runs.jsonl")
    summary["lm"] = lm_summary(lm_runs) if lm_runs else None
    summary["timing"] = timing
    summary["targets"] = targets(summary, timing)
    summary["wall_seconds"] = wall_seconds
    dest = out / "report"  # the cross-suite report: summary.json, table.md, decisions.png
    dest.mkdir(parents=True, exist_ok=True)
    plot = plot_decisions(dest, records)
    summary["plot"] = None if plot is None else plot.name
    write_results(dest, summary, table(summary))
    return summary
