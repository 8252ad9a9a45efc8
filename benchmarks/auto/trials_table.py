"""Tables of the ``keep="auto"`` trials measurement (MNIST-1D suites: user, topk-0.25, random-0.25, auto-topk; and
the controls and ablations of ``MEASURE_FIRST_ARMS`` where a record has them).

Reads the record ``<results>/<prefix>/`` (``<suite>/runs.jsonl``, ``long-<suite>/runs.jsonl``, ``lm/runs.jsonl``
and the ``meta`` of ``report/summary.json``, kept on a rerun); writes ``report/{table.md,summary.json,decisions.png}``.
Commands, targets and readings: ``benchmarks/auto/README.md``."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.auto.arms import FIRST_VERDICTS, plain_before_verdict
from benchmarks.harness._sb import Auto
from benchmarks.harness.plots import pyplot
from benchmarks.harness.records import read_jsonl
from benchmarks.harness.stats import curve, mean, or_never, reach, sd, seconds_to

RESULTS = Path(__file__).resolve().parents[1] / "results" / "auto"
SUITES = ("mlp100k", "cnn100k", "noisy100k", "noisy30-100k")
LONG_SUITES = ("mlp100k", "cnn100k", "noisy100k")  # the long-window ablation's own runs: <P>/long-<suite>
NOISY = ("noisy100k", "noisy30-100k")  # where auto must never lose
LM_ARMS = ("baseline", "auto")
FIRST_ARMS = tuple(f"topk-0.25-after-{n}" for n in FIRST_VERDICTS)  # whole batches for n batches, then top-k
ARMS = ("user", "small-64", "topk-0.25", "random-0.25", "topk-0.25-after-trial", "topk-0.25-until-verdict",
        *FIRST_ARMS, "auto-topk", "auto-topk-once", "auto-topk-start-on", "auto-topk-long",
        "auto-topk-long-window")  # fmt: skip
AUTO_ARMS = ("auto-topk", "auto-topk-once", "auto-topk-start-on")  # the main record's keep="auto" arms
LONG_ARMS = ("auto-topk-long", "auto-topk-long-window")  # the long-window ablation's (<P>/long-<suite>)
ALL_AUTO = AUTO_ARMS + LONG_ARMS
CAPTURE = 0.87  # auto's speed-up at least this share of top-k 0.25's (mlp100k, cnn100k)
NO_LOSS = 0.95  # auto's speed-up at least this on the flipped-label suites (NOISY)


def per_seed(run: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    to, _ = reach(curve(run), user["accuracy"])
    to_fe = None
    if all("fe" in p for p in run["curve"]):  # forward-equivalents: no clock, so no timing noise
        to_fe, _ = reach([(p["fe"], p["accuracy"]) for p in run["curve"]], user["accuracy"])
    return {
        "seed": run["seed"],
        "accuracy": run["accuracy"],
        "seconds": run["seconds"],
        "to_user": to,
        "speedup": None if to is None else user["seconds"] / to,
        "fe_speedup": None if to_fe is None else user["fe"] / to_fe,
    }


def epoch_batches(run: dict[str, Any]) -> int:
    """Loader batches per epoch of ``run``'s loader: its steps over its epochs (for an SB run, the loader batches it
    read: ``epochs_read`` where the record has it)."""
    return max(1, round(run["steps"] / max(run.get("epochs_read") or run.get("epochs") or 1, 1e-9)))


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    users = {r["seed"]: r for r in records if r["arm"] == "user"}
    out: dict[str, Any] = {"user_accuracy_sd": sd([r["accuracy"] for r in users.values()]), "arms": {}}
    if users:  # the user's plain run steps once per loader batch
        out["epoch_batches"] = epoch_batches(next(iter(users.values())))
    for arm in [a for a in ARMS if any(r["arm"] == a for r in records)]:
        runs = sorted((r for r in records if r["arm"] == arm and r["seed"] in users), key=lambda r: r["seed"])
        seeds = [per_seed(r, users[r["seed"]]) for r in runs]
        reached = all(s["to_user"] is not None for s in seeds)
        row: dict[str, Any] = {
            "seeds": seeds,
            "accuracy_mean": mean([s["accuracy"] for s in seeds]),
            "accuracy_sd": sd([s["accuracy"] for s in seeds]),
            "seconds_mean": mean([s["seconds"] for s in seeds]),
            "to_user_mean": mean([s["to_user"] for s in seeds]) if reached else None,
            "speedup_mean": mean([s["speedup"] for s in seeds]) if reached else None,
            "fe_speedup_mean": (
                mean([s["fe_speedup"] for s in seeds]) if all(s["fe_speedup"] is not None for s in seeds) else None
            ),
            "fe_known": all("fe" in p for r in runs for p in r["curve"]),  # records before FE points: n/a
            "reached": sum(s["to_user"] is not None for s in seeds),
        }
        # report.py's convention, for a number where a seed never reaches: the seed-mean curve to the user's mean
        # final accuracy, against the user's mean seconds
        to_mean = seconds_to(runs, mean([u["accuracy"] for u in users.values()]))
        row["speedup_mean_curve"] = None if to_mean is None else mean([u["seconds"] for u in users.values()]) / to_mean
        if "auto" in runs[0]:
            said = ("on_share", "trials", "trial_share", "history", "reason")
            row["auto"] = [{"seed": r["seed"], **{k: r["auto"][k] for k in said}, "steps": r["steps"]} for r in runs]
            row["on_share_mean"] = mean([a["on_share"] for a in row["auto"]])
            row["trial_share_mean"] = mean([a["trial_share"] for a in row["auto"]])
        out["arms"][arm] = row
    return out


def targets(name: str, suite: dict[str, Any], arm: str = "auto-topk") -> list[str]:
    """Issue 28's targets for the ``keep="auto"`` arm ``arm`` on suite ``name``."""
    arms = suite["arms"]
    auto, topk, user = arms.get(arm), arms.get("topk-0.25"), arms.get("user")
    if auto is None or user is None:
        return []
    a = auto["speedup_mean"]
    if name in ("mlp100k", "cnn100k") and topk is not None:
        t = topk["speedup_mean"]
        if a is None or t is None:
            verdict = "missed" if a is None else "met"
            detail = f"{arm} {or_never(a)}, topk-0.25 {or_never(t)}"
        else:
            verdict = "met" if a >= CAPTURE * t else "missed"
            detail = f"{arm} {a:.2f}x vs topk-0.25 {t:.2f}x: ratio {a / t:.2f} (target >= {CAPTURE})"
        said = [f"{name}: {arm} captures top-k's win: **{verdict}** ({detail})"]
        late = arms.get("topk-0.25-after-trial")
        if arm == "auto-topk" and late is not None and late["speedup_mean"] is not None and t is not None:
            said.append(
                f"{name}: what measuring first allows (not a target): topk-0.25-after-trial "
                f"{or_never(late['speedup_mean'])}, "
                f"{late['speedup_mean'] / t:.2f} of topk-0.25's (whole batches until auto's first verdict, then top-k)"
            )
        return said
    if name in NOISY:
        floor = user["accuracy_mean"] - suite["user_accuracy_sd"]
        acc_ok = auto["accuracy_mean"] >= floor
        speed_ok = a is not None and a >= NO_LOSS
        return [
            f"{name}: {arm}'s final accuracy no worse than user - 1 sd: **{'met' if acc_ok else 'missed'}** "
            f"({arm} {pct(auto['accuracy_mean'])}, floor {pct(floor)} = user {pct(user['accuracy_mean'])} - sd "
            f"{pct(suite['user_accuracy_sd'])})",
            f"{name}: {arm}'s speed-up >= {NO_LOSS}: **{'met' if speed_ok else 'missed'}** ({arm} {or_never(a)})",
        ]
    return []


def pct(v: float) -> str:
    return f"{100 * v:.2f}%"


def suite_lines(name: str, suite: dict[str, Any], heading: str = "##") -> list[str]:
    """One suite's per-seed table and each ``keep="auto"`` arm's decisions."""
    lines: list[str] = []
    lines += [f"{heading} {name}", "", "| arm | seed | accuracy | seconds | s to user's acc | speed-up |",
              "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for arm, row in suite["arms"].items():
        for seed in row["seeds"]:
            lines.append(f"| {arm} | {seed['seed']} | {pct(seed['accuracy'])} | {seed['seconds']:.1f} | "
                         f"{or_never(seed['to_user'], '', '.1f')} | {or_never(seed['speedup'])} |")  # fmt: skip
        n = len(row["seeds"])
        partial = "" if row["reached"] == n else f" ({row['reached']}/{n} seeds reach)"
        lines.append(f"| **{arm}** | mean | **{pct(row['accuracy_mean'])}** ± {pct(row['accuracy_sd'])} | "
                     f"**{row['seconds_mean']:.1f}** | **{or_never(row['to_user_mean'], '', '.1f')}** | "
                     f"**{or_never(row['speedup_mean'])}**{partial}; "
                     f"mean-curve {or_never(row['speedup_mean_curve'])} |")  # fmt: skip
    for arm in ALL_AUTO:
        auto = suite["arms"].get(arm)
        if auto is None:
            continue
        lines += ["", f"{arm}: on-share {100 * auto['on_share_mean']:.1f}% (mean), trial share "
                  f"{100 * auto['trial_share_mean']:.1f}% (mean)", "",
                  "| seed | steps | on-share | trials | trial share | decisions (step: on/off keep, measured "
                  "speed-up) |", "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        for a in auto["auto"]:
            decisions = "; ".join(
                f"{int(d[0])}: {'ON' if d[1] else 'off'} {d[2]:g} {'n/a' if d[4] != d[4] else f'{d[4]:.2f}x'}"
                for d in a["history"]
            )
            lines.append(f"| {a['seed']} | {a['steps']} | {100 * a['on_share']:.1f}% | {a['trials']} | "
                         f"{100 * a['trial_share']:.1f}% | {decisions} |")  # fmt: skip
        lines += ["", "Last reason per seed:"]
        lines += [f"- seed {a['seed']}: {a['reason']}" for a in auto["auto"]]
    lines.append("")
    return lines


LONG_TEXT = (
    '`keep="auto"` on top-k with keep 0.25 alone and longer trial windows than the default\'s 16 + 16 loader '
    "batches on these suites: `auto-topk-long`, `Auto(keeps=(0.25,), window=64, settle=64)`, a trial of 8 windows of "
    "128 batches (1,024; the default's is 12 windows of 32, 384), to outlast more of the switch's transient; "
    "`auto-topk-long-window`, `window=64, settle=16`, 8 windows of 80 (640): is it the longer average or the longer "
    "settling that matters? Does a longer trial capture top-k's win, and still stay off where selection loses? Each "
    "suite's runs are its own (`trials/long-<suite>`): the user's recipe and top-k 0.25 beside the ablation, one "
    "process; the flipped-label suite at 30% has both arms in `trials/noisy30-100k`."
)


MEASURE_FIRST_ARMS = ("small-64", "topk-0.25-after-trial", "topk-0.25-until-verdict", "auto-topk-once",
                      "auto-topk-start-on")  # fmt: skip
MEASURE_FIRST_TEXT = (
    "Controls and ablations beside the default (`benchmarks/auto/arms.py`, `ablation_arms`): `small-64`, the user's "
    "recipe at batch 64 (= ceil(0.25 x 256)), its LR unchanged, on every sample (the small-batch control); "
    '`topk-0.25-after-trial`, whole batches for as many loader batches as `keep="auto"` trains whole before its '
    "first verdict (379 at these suites' 313 batches an epoch: the warm-up, the trial's plain windows and the span "
    "in which its last window lands), then top-k at keep 0.25 to the end: what those plain batches cost alone, without "
    "the trial's switches, i.e. the most any design that measures plain training on the live run before it "
    "decides can capture; `topk-0.25-until-verdict`, its mirror (top-k for those batches, then whole batches: what "
    "selecting until a first verdict of 'off' costs where selection loses); `auto-topk-once`, the defaults with no "
    "re-trial after the first verdict (what the exit test's trials cost); `auto-topk-start-on`, the defaults with "
    "`Auto(start_on=True)` (selection from the first batch; the first trial still takes the entry bar), an option "
    "of 61e5216 removed after this record (benchmarks/auto/README.md)."
)


def first_verdict_lines(summary: dict[str, Any]) -> list[str]:
    """Per suite: top-k 0.25 after ``n`` loader batches of whole batches, for every ``n`` the record measured (0: top-k
    from the start; ``topk-0.25-after-trial``: as many as ``keep="auto"``'s defaults train whole before their first
    verdict), its speed-up and its share of top-k's, in seconds and in forward-equivalents."""
    rows = []
    for name, suite in summary["suites"].items():
        arms, topk = suite["arms"], suite["arms"].get("topk-0.25")
        if topk is None or not any(a in arms for a in FIRST_ARMS):
            continue
        points = [(0, "topk-0.25")] + [(n, f"topk-0.25-after-{n}") for n in FIRST_VERDICTS]
        if "topk-0.25-after-trial" in arms:
            points.append((plain_before_verdict(suite["epoch_batches"]), "topk-0.25-after-trial"))
        for n, arm in points:
            row = arms.get(arm)
            if row is None:
                continue
            sec, fe = row["speedup_mean"], row["fe_speedup_mean"]
            share = "" if sec is None or topk["speedup_mean"] is None else f"{sec / topk['speedup_mean']:.2f}"
            fe_share = "" if fe is None or topk["fe_speedup_mean"] is None else f"{fe / topk['fe_speedup_mean']:.2f}"
            fe_cell = or_never(fe) if row["fe_known"] else "n/a"
            rows.append(f"| {name} | {arm} | {n} | {pct(row['accuracy_mean'])} | {or_never(sec)} | {share} | "
                        f"{fe_cell} | {fe_share} |")  # fmt: skip
    if not rows:
        return []
    return [
        "## Where the first verdict would have to fall",
        "",
        "Top-k 0.25 after `n` loader batches of whole batches, no trial and no switch back: the most a design that "
        "measures whole batches on the live run can capture if its first verdict lands at batch `n` "
        '(`topk-0.25-after-trial`: as many as `keep="auto"`\'s defaults train whole before their first verdict on the '
        f"suite's epoch, 379 at 313 loader batches). Issue 28's capture target is {CAPTURE} of top-k's speed-up. "
        "Speed-up (s): seed mean of the user's seconds to the user's accuracy over the arm's; (FE): the same in "
        "forward-equivalents (a scored sample 1, a trained one 3: priced, but free of the timing noise that moves the "
        "seconds' ratios by about a tenth between records).",
        "",
        "| suite | arm | n | accuracy | speed-up (s) | of top-k's | speed-up (FE) | of top-k's (FE) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]


def trial_check_lines(summary: dict[str, Any]) -> list[str]:
    """Each suite's first-trial speed-ups (``auto-topk``'s first decision, per seed) beside top-k 0.25's speed-up
    over its whole run (the same seed's): the trial's estimate checked against the arm it stands for."""
    rows = []
    for name, suite in summary["suites"].items():
        auto, topk = suite["arms"].get("auto-topk"), suite["arms"].get("topk-0.25")
        if auto is None or topk is None:
            continue
        whole = {s["seed"]: s["speedup"] for s in topk["seeds"]}
        cells = []
        for a in auto["auto"]:
            first = a["history"][0][4] if a["history"] else float("nan")
            trial = "n/a" if first != first else f"{first:.2f}x"
            cells.append(f"{a['seed']}: {trial} / {or_never(whole.get(a['seed']))}")
        rows.append(f"| {name} | {'; '.join(cells)} |")
    if not rows:
        return []
    return [
        "## The trial's estimate against the whole run",
        "",
        "Per seed: the first trial's measured speed-up (of the share it chose, or of the best one while off: keep 0.25 "
        "alone since the second defaults; progress per second against whole batches over the trial's windows; n/a: "
        "no ratio) / top-k 0.25's speed-up over its whole run (the user's seconds to the "
        "user's accuracy over top-k's). The trial measures a rate over its windows, the whole run a time to an "
        "accuracy: the same sign and side of 1 is what the verdict needs; the size is not comparable where plain's "
        "rate per window is near zero (the evals32 record and those before it print that ratio anyway; the trials "
        "of later commits print no ratio where plain's rate is within 2 standard errors of zero).",
        "",
        "| suite | seed: trial / whole run |",
        "| --- | --- |",
        *rows,
        "",
    ]


def table(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = ["# keep='auto' by trials on the live run: MNIST-1D suites", ""]
    if meta:
        lines += [f"Date: {meta.get('date', '?')}. Branch/commit: {meta.get('commit', '?')}.", ""]
        lines += ["Commands (one after the other, each alone on the machine's 2 cores):", "", "```"]
        lines += [*meta.get("commands", []), "```", ""]
        lines += [f"Load averages (1/5/15 min): start {meta.get('load_start', '?')}, end {meta.get('load_end', '?')}"
                  " (seconds are thread CPU seconds).", ""]  # fmt: skip
    lines += [
        f"Time to accuracy: seconds at which the run's test curve ({summary.get('evals', '?')} evaluations, linear "
        "between) first reaches the "
        "same seed's user final accuracy; speed-up = the user's seconds (whole run) / that. Means: over seeds 0-2 (a "
        "seed that never reaches makes the mean 'never'); 'mean-curve': report.py's convention (the seed-mean curve "
        "to the user's mean final accuracy, over the user's mean seconds).",
        "",
    ]
    if any(a in suite["arms"] for suite in summary["suites"].values() for a in MEASURE_FIRST_ARMS):
        lines += [MEASURE_FIRST_TEXT, ""]
    for name, suite in summary["suites"].items():
        lines += suite_lines(name, suite)
    if summary["targets"]:  # none in a record without a keep="auto" arm
        lines += ["## Targets", ""] + [f"- {t}" for t in summary["targets"]] + [""]
    lines += first_verdict_lines(summary)
    lines += trial_check_lines(summary)
    if summary.get("long"):
        lines += ["## Ablation: longer trial windows (`auto-topk-long`, `auto-topk-long-window`)", "", LONG_TEXT, ""]
        for name, suite in summary["long"].items():
            lines += suite_lines(name, suite, "###")
        lines += ["### Its targets", ""] + [f"- {t}" for t in summary["long_targets"]] + [""]
    if meta.get("reading"):
        lines += ["## Reading", "", meta["reading"], ""]
    if meta.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in meta["notes"]] + [""]
    return "\n".join(lines)


def lm_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per regime: each arm's final nats/byte per seed and mean +- sd, seconds, and auto's speed-up to the
    baseline's final loss of the same seed (the baseline's seconds over auto's first crossing, linear between the
    curve's evaluations; 'never' if it does not get there)."""
    out: dict[str, Any] = {}
    for regime in sorted({r["regime"] for r in records}):
        runs = [r for r in records if r["regime"] == regime]
        base = {r["seed"]: r for r in runs if r["arm"] == "baseline"}
        rows: dict[str, Any] = {}
        for arm in LM_ARMS:
            mine = sorted((r for r in runs if r["arm"] == arm), key=lambda r: r["seed"])
            if not mine:
                continue
            speed = []
            for run in mine:
                ref = base.get(run["seed"])
                at = None if ref is None else _first_below(run["curve"], ref["val_loss"])
                speed.append(None if at is None or ref is None else ref["seconds"] / at)
            losses = [r["val_loss"] for r in mine]
            rows[arm] = {
                "seeds": [r["seed"] for r in mine], "val_loss": losses, "mean": mean(losses),
                "sd": sd(losses) if len(losses) > 1 else 0.0, "seconds": [r["seconds"] for r in mine],
                "speedup": speed,
                "auto": [r.get("auto") for r in mine],
            }  # fmt: skip
        out[regime] = rows
    return out


def _first_below(points: list[dict[str, Any]], target: float) -> float | None:
    """Seconds at which the curve's val_loss first reaches ``target`` (``stats.reach`` on minus the loss: linear
    between evaluations)."""
    return reach([(p["seconds"], -p["val_loss"]) for p in points], -target)[0]


def lm_lines(lm: dict[str, Any]) -> list[str]:
    lines = ["## lm (nats/byte, lower is better)", "",
             "| regime | arm | val loss per seed | mean +- sd | seconds | speed-up to the baseline's loss |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for regime, rows in lm.items():
        for arm, row in rows.items():
            losses = " / ".join(f"{v:.4f}" for v in row["val_loss"])
            speed = " / ".join(or_never(v) for v in row["speedup"])
            seconds = " / ".join(f"{v:.1f}" for v in row["seconds"])
            lines.append(
                f"| {regime} | {arm} | {losses} | {row['mean']:.4f} +- {row['sd']:.4f} | {seconds} | {speed} |"
            )
    lines.append("")
    for regime, rows in lm.items():
        if "auto" in rows and "baseline" in rows:
            auto, base = rows["auto"], rows["baseline"]
            floor = base["mean"] + base["sd"]
            reached = [v for v in auto["speedup"] if v is not None]
            ok = auto["mean"] <= floor and len(reached) == len(auto["speedup"]) and mean(reached) >= NO_LOSS
            lines.append(
                f"- {regime}: auto {auto['mean']:.4f} against the baseline's {base['mean']:.4f} + 1 sd = {floor:.4f}; "
                f"speed-up {' / '.join(or_never(v) for v in auto['speedup'])}: never loses "
                f"(no worse than one sd, speed-up >= {NO_LOSS}): {'met' if ok else 'missed'}"
            )
            for a in auto["auto"]:
                if a:
                    lines.append(f"  - decisions (step, on, keep): {[(d[0], d[1], d[2]) for d in a['history']]}")
    return [*lines, ""]


def plot_trials(
    runs_by_suite: dict[str, list[dict[str, Any]]],
    out: Path,
    settings: Auto | None = None,
    settle_is_window: bool = False,
) -> Path | None:
    """One panel per suite: per seed, a band over the run's loader batches, grey where a trial ran, green where
    selection was on, and each decision's measured speed-up (the chosen share, or the best one while off).
    ``settings``: the ``Auto()`` the runs were made with (default: this commit's), sized per run;
    ``settle_is_window``: the sizing of the first defaults (the ``trials`` record), whose settling part was sized as
    the window."""
    settings = Auto() if settings is None else settings
    plt = pyplot()
    if plt is None:
        return None
    panels = {name: [r for r in runs if r.get("auto")] for name, runs in runs_by_suite.items()}
    panels = {name: runs for name, runs in panels.items() if runs}
    if not panels:
        return None
    heights = [1.0 + 0.3 * len(runs) for runs in panels.values()]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})  # fmt: skip
    for ax, (name, runs) in zip(axes[:, 0], panels.items(), strict=True):
        for row, run in enumerate(sorted(runs, key=lambda r: (r.get("regime", ""), r["seed"]))):
            steps = run["steps"]
            sized = settings.sized(epoch_batches(run))
            if settle_is_window:
                sized = replace(sized, settle=sized.window)
            assert sized.window is not None and sized.settle is not None
            span, trial = sized.window + sized.settle, sized.trial_batches
            history = run["auto"]["history"]
            for at, on, keep, tau, speedup in history:
                start = at - span - trial  # the decision lands settle + window batches after the trial's end
                if tau == tau:  # a NaN tau: decided without a trial (Auto.min_kept)
                    ax.broken_barh([(start, trial)], (row - 0.4, 0.8), color="0.8")
                label = "n/a" if speedup != speedup else f"{speedup:.2f}x"
                ax.text(at, row, f"{'on ' + str(keep) if on else 'off'} {label}", fontsize=7, va="center")
            ons = [(at, (nxt[0] if nxt else steps) - at) for (at, on, *_), nxt in
                   zip(history, [*history[1:], None][: len(history)], strict=True) if on]  # fmt: skip
            ax.broken_barh(ons, (row - 0.25, 0.5), color="tab:green", alpha=0.6)
            ax.plot([0, steps], [row, row], color="black", lw=0.4)
        ax.set_yticks(range(len(runs)))
        ax.set_yticklabels([f"{r.get('regime', '')} seed {r['seed']}".strip() for r in
                            sorted(runs, key=lambda r: (r.get("regime", ""), r["seed"]))], fontsize=7)  # fmt: skip
        ax.set_title(f"{name}: keep='auto' trials (grey), selection on (green), each decision's measured speed-up",
                     fontsize=9)  # fmt: skip
        ax.set_xlabel("loader batch")
    fig.tight_layout()
    path = out / "decisions.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


HARM_SUITE = "cnn20k-noisy30-short"  # issue 42: a short run where selection hurts (378 loader batches)
HARM_ARMS = ("user", "topk-0.25", "auto-topk", "auto-topk-run")
HARM_POINTS = 0.005  # keep="auto" within half a point of the user's mean final accuracy


def harm_table(results: Path, records: dict[str, str]) -> str:
    """Per seed final accuracy of :data:`HARM_ARMS` on :data:`HARM_SUITE` in each record (``label: prefix``, read from
    ``<results>/<prefix>/<suite>/runs.jsonl``), the means, and whether each auto arm is within :data:`HARM_POINTS` of
    the same record's user mean; writes ``<results>/harm/report/table.md`` and ``summary.json``."""
    lines = [
        "| record | arm | seed 0 | seed 1 | seed 2 | mean | to the user's mean |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    summary: dict[str, Any] = {}
    for label, prefix in records.items():
        runs = read_jsonl(results / prefix / HARM_SUITE / "runs.jsonl")
        by_arm = {arm: sorted((r for r in runs if r["arm"] == arm), key=lambda r: r["seed"]) for arm in HARM_ARMS}
        user = mean([r["accuracy"] for r in by_arm["user"]])
        summary[label] = {}
        for arm, arm_runs in by_arm.items():
            if not arm_runs:
                continue
            accuracy = mean([r["accuracy"] for r in arm_runs])
            met = "" if not arm.startswith("auto") else (" (met)" if accuracy >= user - HARM_POINTS else " (missed)")
            seeds = " | ".join(f"{100 * r['accuracy']:.2f}%" for r in arm_runs)
            lines.append(f"| {label} | {arm} | {seeds} | {100 * accuracy:.2f}% | {100 * (accuracy - user):+.2f}{met} |")
            reasons = [r["auto"]["reason"] for r in arm_runs if "auto" in r]
            summary[label][arm] = {"accuracy": [r["accuracy"] for r in arm_runs], "mean": accuracy, "reasons": reasons}
    title = f"# keep='auto' on {HARM_SUITE}: what its trials cost where selection hurts (issue 42)"
    text = title + "\n\n" + "\n".join(lines)
    for prefix, what in CHECKS.items():
        checks = harm_check_lines(results, prefix)
        if checks:
            text += f"\n\nThe recorded suites {what} (`{prefix}/<suite>`), beside the evals32 record:\n\n"
            text += "\n".join(checks)
    out = results / "harm" / "report"
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return text


CHECKS = {  # record -> what it reran the recorded suites with
    "harm-check": "with the bounds",
    "harm-wait": "with the unknown-length wait (4601b63, reverted)",
    "harm-live": "with the live check (d739295, reverted)",
}
HARM_RECORDS = {  # label -> record of the short run
    "before (ce37b18)": "harm-before",
    "after": "harm",
    "wait, reverted (4601b63)": "harm-wait",
    "live check, reverted (d739295)": "harm-live",
}


def harm_check_lines(results: Path, prefix: str = "harm-check") -> list[str]:
    """The recorded suites rerun in record ``prefix`` (``<prefix>/<suite>``) beside the ``evals32`` record's
    ``auto-topk``: per seed final accuracy, the share of batches selected, and each decision (``on``/``off`` at its
    loader batch; "stopped early" where the early stop ended a trial; none where no trial decided)."""
    lines: list[str] = []
    for name in SUITES:
        now = read_jsonl(results / prefix / name / "runs.jsonl")
        recorded = read_jsonl(results / "evals32" / name / "runs.jsonl")
        before = {r["seed"]: r for r in recorded if r["arm"] == "auto-topk"}
        for run in sorted(now, key=lambda r: (r["arm"], r["seed"])):
            old = before.get(run["seed"])
            if old is None:
                continue
            if not lines:
                lines = ["| suite | arm | seed | accuracy (evals32's auto-topk) | selected share (evals32's) "
                         "| first verdict's measured speed-up, live clock (evals32's) | decisions |",
                         "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
            decisions = ", ".join(f"{'on' if on else 'off'} at {at:g}" for at, on, *_ in run["auto"]["history"])
            stopped = " (stopped early)" if "the trial stopped" in run["auto"]["reason"] else ""
            accuracy = f"{100 * run['accuracy']:.2f}% ({100 * old['accuracy']:.2f}%)"
            share = f"{run['auto']['on_share']:.3f} ({old['auto']['on_share']:.3f})"
            first = f"{run['auto']['history'][0][4]:.2f}x" if run["auto"]["history"] else "none"
            speed = f"{first} ({old['auto']['history'][0][4]:.2f}x)"
            lines.append(
                f"| {name} | {run['arm']} | {run['seed']} | {accuracy} | {share} | {speed} | {decisions}{stopped} |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--prefix", default="trials", help="the record: its suites in PREFIX/<suite>, the table in PREFIX/report"
    )
    parser.add_argument(
        "--harm",
        action="store_true",
        help=f"the {HARM_SUITE} table (every record of HARM_RECORDS, and the reruns of CHECKS)",
    )
    args = parser.parse_args(argv)
    if args.harm:
        print(harm_table(args.results, HARM_RECORDS))
        return
    prefix = args.prefix
    suites = {name: read_jsonl(args.results / prefix / name / "runs.jsonl") for name in SUITES}
    summary: dict[str, Any] = {"suites": {n: summarize(r) for n, r in suites.items() if r}}
    summary["evals"] = "/".join(str(n) for n in sorted({len(r["curve"]) for runs in suites.values() for r in runs}))
    summary["targets"] = [
        t for n, suite in summary["suites"].items() for arm in ALL_AUTO for t in targets(n, suite, arm)
    ]
    long = {name: read_jsonl(args.results / prefix / f"long-{name}" / "runs.jsonl") for name in LONG_SUITES}
    summary["long"] = {name: summarize(runs) for name, runs in long.items() if runs}
    summary["long_targets"] = [
        t for n, suite in summary["long"].items() for arm in LONG_ARMS for t in targets(n, suite, arm)
    ]
    lm_path = args.results / prefix / "lm" / "runs.jsonl"
    lm_runs = read_jsonl(lm_path)  # none where the record has no LM runs
    summary["lm"] = lm_summary(lm_runs) if lm_path.exists() else {}
    out = args.results / prefix / "report"
    out.mkdir(parents=True, exist_ok=True)
    previous = out / "summary.json"
    meta = json.loads(previous.read_text()).get("meta", {}) if previous.exists() else {}
    summary["meta"] = meta
    text = table(summary, meta)
    if summary["lm"]:
        text = text.rstrip() + "\n\n" + "\n".join(lm_lines(summary["lm"]))
    default = {name: [r for r in runs if r["arm"] == "auto-topk"] for name, runs in suites.items()}
    made_with = dict(meta.get("auto") or {})  # the defaults the record was made with, where they are not this commit's
    settle_is_window = bool(made_with.pop("settle_is_window", False))
    settings = Auto(**{**made_with, "keeps": tuple(made_with["keeps"])}) if made_with else None
    plot = plot_trials({**default, "lm": [r for r in lm_runs if r["arm"] == "auto"]}, out, settings, settle_is_window)
    if plot is not None:
        text = text.rstrip() + f"\n\nDecisions over training: [{plot.name}]({plot.name}).\n"
    previous.write_text(json.dumps(summary, indent=1))
    (out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
