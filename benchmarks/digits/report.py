"""The digits suite's report: per arm the seed means and every seed's final accuracy, seconds, seconds to the user's
final accuracy and speed-up; auto's on-share, trials and reason; whether auto trialled; the targets.
Speed-up: the auto benchmark's (``benchmarks/digits/README.md``), per seed and on the seed-mean curve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness._sb import Auto
from benchmarks.harness.records import read_jsonl, write_results
from benchmarks.harness.stats import curve, mean, or_never, reach, sd, seconds_to

FIXED = ("topk-0.25", "topk-0.5", "random-0.25")  # the fixed selection arms auto is measured against


def speedup(user_seconds: float, to: float | None) -> float | None:
    return None if to is None or to <= 0 else user_seconds / to


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: seed means and per-seed numbers; the targets' inputs."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_arm.setdefault(r["arm"], []).append(r)
    user = {r["seed"]: r for r in by_arm["user"]}
    target = mean([r["accuracy"] for r in user.values()])
    user_seconds = mean([r["seconds"] for r in user.values()])
    arms: dict[str, Any] = {}
    for name, runs in by_arm.items():
        runs = sorted(runs, key=lambda r: r["seed"])
        to = seconds_to(runs, target)
        seeds = []
        for r in runs:
            u = user[r["seed"]]
            to_seed = reach(curve(r), u["accuracy"])[0]
            row = {
                "seed": r["seed"],
                "accuracy": r["accuracy"],
                "seconds": r["seconds"],
                "to_user": to_seed,
                "speedup": speedup(u["seconds"], to_seed),
                "steps": r["steps"],
            }
            if "auto" in r:
                row.update(on_share=r["auto"]["on_share"], trials=r["auto"]["trials"], reason=r["auto"]["reason"],
                           trial_share=r["auto"]["trial_share"])  # fmt: skip
            seeds.append(row)
        per_seed = [s["speedup"] for s in seeds]
        arms[name] = {
            "seeds": len(runs),
            "accuracy_mean": mean([r["accuracy"] for r in runs]),
            "accuracy_sd": sd([r["accuracy"] for r in runs]),
            "seconds_mean": mean([r["seconds"] for r in runs]),
            "to_user": to,
            "speedup": speedup(user_seconds, to),
            "speedup_sd": sd([s for s in per_seed if s is not None]) if None not in per_seed else None,
            "loader_batches": runs[0]["curve"][-1]["steps"] if name != "auto" else None,
            "per_seed": seeds,
        }
    return {"user_accuracy": target, "user_sd": sd([r["accuracy"] for r in user.values()]),
            "user_seconds": user_seconds, "arms": arms}  # fmt: skip


def targets(s: dict[str, Any]) -> dict[str, str]:
    """The three targets for auto, each "met"/"missed", with the numbers, and whether a verdict lies within one sd."""
    auto, user_sd = s["arms"]["auto"], s["user_sd"]
    out: dict[str, str] = {}
    gap = auto["accuracy_mean"] - s["user_accuracy"]
    close = abs(gap + user_sd) < max(user_sd, auto["accuracy_sd"])
    out["accuracy no worse than the user's by more than one seed sd"] = (
        f"{'met' if gap >= -user_sd else 'missed'}: auto {100 * auto['accuracy_mean']:.2f}% vs the user's "
        f"{100 * s['user_accuracy']:.2f}% (gap {100 * gap:+.2f} pp, user sd {100 * user_sd:.2f} pp)"
        + (" (within one sd of the line)" if close else "")
    )
    x = auto["speedup"]
    near = x is not None and auto["speedup_sd"] is not None and abs(x - 0.95) < auto["speedup_sd"]
    out["speed-up >= 0.95"] = f"{'met' if x is not None and x >= 0.95 else 'missed'}: {or_never(x)}" + (
        f" (per-seed sd {auto['speedup_sd']:.2f}: within one sd of the line)" if near else ""
    )
    user_to = {p["seed"]: p["to_user"] for p in s["arms"]["user"]["per_seed"]}
    winners = {  # measurably wins: reaches each seed's user accuracy before that user run does, on every seed
        name: s["arms"][name]["speedup"]
        for name in FIXED
        if name in s["arms"]
        and s["arms"][name]["speedup"] is not None
        and all(p["to_user"] is not None and p["to_user"] < user_to[p["seed"]] for p in s["arms"][name]["per_seed"])
    }
    key = ">= 0.87x the best fixed arm's speed-up where one measurably wins"
    if not winners:
        out[key] = "not applicable: no fixed arm reaches the user's accuracy before the user's run on every seed"
    else:
        best = max(winners, key=lambda n: winners[n])
        line = 0.87 * winners[best]
        ok = x is not None and x >= line
        per_seed = [p["speedup"] for p in auto["per_seed"]]
        best_per_seed = [p["speedup"] for p in s["arms"][best]["per_seed"]]
        again = ""
        if None not in per_seed and None not in best_per_seed:
            mine, theirs = mean(per_seed), mean(best_per_seed)
            again = (
                f"; on the per-seed means auto {mine:.2f}x vs {best} {theirs:.2f}x (0.87x: {0.87 * theirs:.2f}x, "
                f"{'met' if mine >= 0.87 * theirs else 'missed'})"
            )
        near = x is not None and auto["speedup_sd"] is not None and abs(x - line) < auto["speedup_sd"]
        out[key] = (
            f"{'met' if ok else 'missed'}: auto {or_never(x)} vs {best} "
            f"{winners[best]:.2f}x (0.87x of it: {line:.2f}x; {best} reaches each seed's user accuracy before the "
            f"user's run does, on every seed){again}"
            + (f" (auto's per-seed sd {auto['speedup_sd']:.2f}: within one sd of the line)" if near else "")
        )
    return out


def _per_seed(a: dict[str, Any]) -> str:
    values = [p["speedup"] for p in a["per_seed"]]
    if None in values:
        return f"never on {values.count(None)} of {len(values)}"
    return f"{mean(values):.2f}x ± {sd(values):.2f}"


def table(s: dict[str, Any], records: list[dict[str, Any]]) -> str:
    lines = [
        f"User recipe: {100 * s['user_accuracy']:.2f}% (seed sd {100 * s['user_sd']:.2f} pp) in "
        f"{s['user_seconds']:.2f} s of thread CPU time (training only).",
        "",
        "| arm | seeds | final acc. (%) | seconds | s to the user's final acc. (seed-mean curve) | speed-up | "
        "speed-up, per-seed mean ± sd | per seed: acc. (%) / s / s to the seed's user acc. / speed-up |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, a in s["arms"].items():
        per = "; ".join(
            f"{p['seed']}: {100 * p['accuracy']:.2f} / {p['seconds']:.2f} / {or_never(p['to_user'], '')} / "
            f"{or_never(p['speedup'])}"
            for p in a["per_seed"]
        )
        lines.append(
            f"| {name} | {a['seeds']} | {100 * a['accuracy_mean']:.2f} ± {100 * a['accuracy_sd']:.2f} | "
            f"{a['seconds_mean']:.2f} | {or_never(a['to_user'], '')} | {or_never(a['speedup'])} | {_per_seed(a)} | "
            f"{per} |"
        )
    auto = s["arms"].get("auto")
    if auto:
        lines += ["", "keep=\"auto\" per seed:", "", "| seed | on-share | trials (stats.auto_trials) | trial share | "
                  "reason (stats.auto_reason) |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
        for p in auto["per_seed"]:
            lines.append(
                f"| {p['seed']} | {p['on_share']:.3f} | {p['trials']} | {p['trial_share']:.3f} | {p['reason']} |"
            )
    loads = [r["load"][0] for r in records if "load" in r]
    if loads:
        lines += ["", f"1-minute load average at the end of each run: {min(loads):.2f}-{max(loads):.2f} (2 cores)."]
    if auto:
        lines += ["", trialled(auto, records)]
    lines += ["", "## Targets (auto)", ""] + [f"- {k}: {v}" for k, v in s["targets"].items()]
    return "\n".join(lines) + "\n"


def trialled(auto: dict[str, Any], records: list[dict[str, Any]]) -> str:
    """Whether ``keep="auto"`` trialled, from its runs' statistics and ``Auto()``'s sizes for this suite's epoch
    (``SBLoader`` sizes the trials to ``len(loader)``: :meth:`Auto.sized`), and what that means for the targets."""
    runs = [r for r in records if r["arm"] == "auto"]
    batches = max(r["steps"] for r in runs)  # shrink layout: one step per loader batch
    epoch = batches // max(r["epochs"] for r in runs)
    settings = Auto().sized(epoch)
    assert settings.warmup is not None and settings.settle is not None and settings.window is not None
    need = settings.warmup + settings.trial_batches + settings.settle + settings.window
    trials = sorted({p["trials"] for p in auto["per_seed"]})
    shares = [p["trial_share"] for p in auto["per_seed"]]
    on = [p["on_share"] for p in auto["per_seed"]]
    sizes = (
        f"with {epoch} loader batches an epoch the trials are sized to windows of settle {settings.settle} + window "
        f"{settings.window}, warmup {settings.warmup}, re-trials every {settings.every} batches; the first decision "
        f"comes at batch {need} of {batches}"
    )
    if max(trials) > 0:
        return (
            f"**Did auto trial?** Yes: {trials} trial(s) per run ({sizes}); trial share "
            f"{100 * mean(shares):.0f}% of the batches, on-share {min(on):.2f}-{max(on):.2f} across seeds."
        )
    return f"**Did auto trial?** No decision was taken: {sizes}."


def report(out: Path) -> dict[str, Any]:
    """Summarise ``out/runs.jsonl``; writes ``out/summary.json`` and ``out/table.md``."""
    records = read_jsonl(out / "runs.jsonl")
    s = summary(records)
    s["targets"] = targets(s) if "auto" in s["arms"] else {}
    write_results(out, s, table(s, records))
    return s
