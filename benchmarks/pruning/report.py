"""The pruning benchmark's reading: plateau-aware tables, verdicts and the accuracy-against-seconds plot.

Seconds are priced from interleaved step timing (``run.py``, the ``timing`` stage).

Reading (plateau-aware). Target ``T``: the tuned baseline's final accuracy at the reference epochs (seed mean);
``T - sd``: the same minus one seed standard deviation. Per arm: seconds to ``T - sd`` and to ``T`` (linear
interpolation of the seed-mean budget curve), accuracy at 0.6x and 0.72x the tuned baseline's seconds (per seed,
paired by seed against ``baseline-tuned`` and ``prune-random``), samples loaded per epoch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.harness.cost import pruning_run_seconds
from benchmarks.harness.plots import pyplot
from benchmarks.harness.stats import at_cost, group, mean, or_never, percent, reach, sd

EQUAL = (0.6, 0.72)  # seconds, as a share of the tuned baseline's, where accuracies are compared


# ----------------------------------------------------------------- reading
def _curve(runs_by_epochs: dict[int, list[dict]], seed: int | None = None) -> list[tuple[float, float]]:
    points = []
    for runs in runs_by_epochs.values():
        chosen = [r for r in runs if seed is None or r["seed"] == seed]
        if chosen:
            points.append((mean([r["priced_seconds"] for r in chosen]), mean([r["accuracy"] for r in chosen])))
    return points


def _seed_at(by_epochs: dict[int, list[dict]], cost: float) -> dict[int, float | None]:
    seeds = sorted({r["seed"] for runs in by_epochs.values() for r in runs})
    return {s: at_cost(_curve(by_epochs, s), cost) for s in seeds}


def _pairs(mine: dict[int, float | None], other: dict[int, float | None]) -> list[float]:
    return [mine[s] - other[s] for s in mine if s in other and mine[s] is not None and other[s] is not None]


def summarise(records: list[dict], timing_: dict[str, Any], name: str, n: int, reference: int) -> dict[str, Any]:
    """Every number of the suite's table (fractions, not percent)."""
    steps = timing_["families"][records[0]["family"]]
    for r in records:
        r["priced_seconds"] = pruning_run_seconds(r, timing_, n)
    arms = group(records)
    tuned = arms["baseline-tuned"][reference]
    target, spread = mean([r["accuracy"] for r in tuned]), sd([r["accuracy"] for r in tuned])
    ref_seconds = mean([r["priced_seconds"] for r in tuned])
    at = {share: {arm: _seed_at(by, share * ref_seconds) for arm, by in arms.items()} for share in EQUAL}
    rows: dict[str, Any] = {}
    for arm, by in arms.items():
        if arm.startswith("tune "):
            continue
        final = by.get(reference) or by[max(by)]
        curve = _curve(by)
        loaded = [sum(r["samples_loaded"]) / (r["epochs"] * n) for r in final if r.get("samples_loaded")]
        decisions = [1000 * s for r in final for s in (r.get("decision_seconds") or [])]
        row: dict[str, Any] = {
            "config": final[0]["config"],
            "budgets": {e: {"accuracy_mean": mean([r["accuracy"] for r in runs]), "accuracy_sd": sd(
                [r["accuracy"] for r in runs]), "seconds": mean([r["priced_seconds"] for r in runs]),
                "x_tuned": mean([r["priced_seconds"] for r in runs]) / ref_seconds, "seeds": len(runs)}
                for e, runs in by.items()},
            "final_epochs": final[0]["epochs"],
            "final_accuracy": [r["accuracy"] for r in final],
            "loaded_share": mean(loaded) if loaded else 1.0,
            "decision_ms_per_epoch": mean(decisions) if decisions else None,
            "noisy_share": mean([r["noisy_share"] for r in final]) if final[0].get("noisy_share") is not None else None,
        }  # fmt: skip
        for label, goal in (("reach_target_minus_sd", target - spread), ("reach_target", target)):
            cost, how = reach(curve, goal)
            row[label] = None if cost is None else cost / ref_seconds
            row[label + "_how"] = how
        for share in EQUAL:
            mine = at[share][arm]
            row[f"at_{share}"] = {"mean": at_cost(curve, share * ref_seconds), "seeds": mine}
            for other in ("baseline-tuned", "prune-random"):
                if other in arms and other != arm:
                    row[f"at_{share}"][f"vs {other}"] = _pairs(mine, at[share][other])
        rows[arm] = row
    grid_rows = {
        arm: {"accuracy": by[max(by)][0]["accuracy"], "seconds": by[max(by)][0]["priced_seconds"]}
        for arm, by in arms.items()
        if arm.startswith("tune ")
    }
    summary = {
        "suite": name,
        "family": records[0]["family"],
        "samples_train": n,
        "reference_epochs": reference,
        "target": target,
        "target_sd": spread,
        "reference_seconds": ref_seconds,
        "arms": rows,
        "tuning": grid_rows,
        "step_seconds": steps,
    }
    summary["sampler_seconds"] = timing_["sampler_seconds"]
    summary["verdicts"] = verdicts(summary, steps)
    return summary


def verdicts(summary: dict[str, Any], steps: dict[str, dict[str, float]]) -> dict[str, str]:
    """The issue's targets, each "met", "missed" or "unmeasured", with the number behind it."""
    rows, out = summary["arms"], {}
    prune = rows.get("prune")
    if prune is None:
        return {}
    reach_ = prune["reach_target_minus_sd"]
    budgets = sorted(prune["budgets"].values(), key=lambda b: b["x_tuned"])
    best = max(budgets, key=lambda b: b["accuracy_mean"])
    out["reach T-sd with <= 0.60x seconds"] = (
        f"missed: not reached at any measured budget ({budgets[0]['x_tuned']:.2f}-{budgets[-1]['x_tuned']:.2f}x;"
        f" best {100 * best['accuracy_mean']:.2f}% at {best['x_tuned']:.2f}x, T - sd = "
        f"{100 * (summary['target'] - summary['target_sd']):.2f}%)"
        if reach_ is None
        else f"{'met' if reach_ <= 0.60 else 'missed'}: {reach_:.2f}x ({prune['reach_target_minus_sd_how']})"
    )
    at = prune["at_0.6"]
    for other in ("baseline-tuned", "prune-random"):
        gaps = at.get(f"vs {other}", [])
        if not gaps:
            out[f"+0.03 pp over {other} at 0.6x seconds"] = "unmeasured (0.6x outside a measured budget range)"
            continue
        gap = 100 * mean(gaps)
        seeds = ", ".join(f"{100 * g:+.2f}" for g in gaps)
        out[f"+0.03 pp over {other} at 0.6x seconds"] = f"{'met' if gap >= 0.03 else 'missed'}: {gap:+.3f} pp [{seeds}]"
    stretch, how = reach(
        [(b["x_tuned"], b["accuracy_mean"]) for b in prune["budgets"].values()], summary["target"] - 0.0002
    )
    out["stretch: within 0.02 pp of T at <= 0.72x"] = (
        f"missed: not within 0.02 pp at any measured budget (up to {budgets[-1]['x_tuned']:.2f}x)"
        if stretch is None
        else f"{'met' if stretch <= 0.72 else 'missed'}: {stretch:.2f}x ({how})"
    )
    tuned_final = rows["baseline-tuned"]["final_accuracy"]
    lo, hi = min(tuned_final), max(tuned_final)
    prune_mean = mean(prune["final_accuracy"])
    within = prune_mean >= lo or abs(prune_mean - mean(tuned_final)) <= summary["target_sd"]
    out["final accuracy within (or above) the tuned baseline's seed spread"] = (
        f"{'met' if within else 'missed'}: {100 * prune_mean:.2f} vs {100 * mean(tuned_final):.2f} "
        f"[{100 * lo:.2f}, {100 * hi:.2f}]"
    )
    b = prune["config"]["batch"]
    plain = steps[f"plain b={b}"]["seconds_per_step"]
    overhead = summary["sampler_seconds"][f"{summary['family']} b={b}"] / plain
    whole = steps[f"prune b={b}"]["seconds_per_step"] / plain - 1
    ms = prune["decision_ms_per_epoch"]
    out["sampler cost <= 3% per step, a few ms per epoch"] = (
        f"{'met' if overhead <= 0.03 and ms <= 10 else 'missed'}: {100 * overhead:.1f}% per step (observe, weights "
        f"and the weighted mean, timed alone; the whole pruning step timed interleaved: {100 * whole:+.1f}%), "
        f"{ms:.1f} ms per epoch for the decision"
    )
    return out


# ----------------------------------------------------------------- output
def table(summary: dict[str, Any]) -> str:
    """The suite's Markdown: headline, per-arm reading, per-budget rows, tuning grid, verdicts."""
    t, s = summary["target"], summary["target_sd"]
    lines = [
        f"Tuned baseline: {summary['arms']['baseline-tuned']['config']['batch']} per batch, peak LR "
        f"{summary['arms']['baseline-tuned']['config']['lr']:g}; target T = its final accuracy at "
        f"{summary['reference_epochs']} epochs, **{100 * t:.2f}%** ± {100 * s:.2f} (seed mean ± sd), "
        f"{summary['reference_seconds']:.1f} s priced from interleaved step timing.",
        "",
        "| arm | seeds | seconds to T - sd (x tuned) | seconds to T (x tuned) | acc. at 0.6x seconds (%) "
        "| vs baseline-tuned at 0.6x (pp) [per seed] | vs prune-random at 0.6x (pp) [per seed] "
        "| acc. at 0.72x (%) | final acc. (%) [epochs] | samples loaded per epoch | decision ms/epoch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm, row in summary["arms"].items():
        cells = []
        for other in ("baseline-tuned", "prune-random"):
            gaps = row["at_0.6"].get(f"vs {other}")
            cells.append("" if not gaps else f"{100 * mean(gaps):+.3f} [{', '.join(f'{100 * g:+.2f}' for g in gaps)}]")
        final = row["final_accuracy"]
        ms = row["decision_ms_per_epoch"]
        lines.append(
            f"| {arm} | {len(final)} | "
            f"{or_never(row['reach_target_minus_sd'], how=row['reach_target_minus_sd_how'])} "
            f"| {or_never(row['reach_target'], how=row['reach_target_how'])} | {percent(row['at_0.6']['mean'])} | "
            f"{cells[0]} "
            f"| {cells[1]} | {percent(row['at_0.72']['mean'])} | {100 * mean(final):.2f} ± {100 * sd(final):.2f} "
            f"[{row['final_epochs']}] | {row['loaded_share']:.2f} | {'' if ms is None else f'{ms:.1f}'} |"
        )
    noisy = {arm: row["noisy_share"] for arm, row in summary["arms"].items() if row["noisy_share"] is not None}
    if noisy:
        lines += ["", "Flipped labels among the trained samples (final budget): " + ", ".join(
            f"{arm} {100 * share:.1f}%" for arm, share in noisy.items()) + "."]  # fmt: skip
    lines += ["", "Per budget (seed mean ± sd; priced seconds and their ratio to the tuned baseline's):", ""]
    lines += ["| arm | epochs | seeds | accuracy (%) | seconds | x tuned |", "| --- | --- | --- | --- | --- | --- |"]
    for arm, row in summary["arms"].items():
        for epochs, b in row["budgets"].items():
            lines.append(
                f"| {arm} | {epochs} | {b['seeds']} | {100 * b['accuracy_mean']:.2f} ± {100 * b['accuracy_sd']:.2f} "
                f"| {b['seconds']:.1f} | {b['x_tuned']:.2f} |"
            )
    if summary["tuning"]:
        lines += ["", "Tuning grid (one seed, the reference epochs):", "", "| run | accuracy (%) | seconds |"]
        lines += ["| --- | --- | --- |"]
        for arm, row in summary["tuning"].items():
            lines.append(f"| {arm} | {100 * row['accuracy']:.2f} | {row['seconds']:.1f} |")
    lines += ["", "Targets (issue 13):", ""]
    lines += [f"- {name}: {verdict}" for name, verdict in summary["verdicts"].items()]
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: Path) -> Path | None:
    """Accuracy against seconds (x the tuned baseline's), every arm, seed mean ± sd per budget."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, row in summary["arms"].items():
        budgets = sorted(row["budgets"].values(), key=lambda b: b["x_tuned"])
        xs = [b["x_tuned"] for b in budgets]
        ys = [100 * b["accuracy_mean"] for b in budgets]
        es = [100 * b["accuracy_sd"] for b in budgets]
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=arm)
    t, s = 100 * summary["target"], 100 * summary["target_sd"]
    ax.axhline(t, color="grey", lw=0.8, ls="--", label="T (tuned, final)")
    ax.axhline(t - s, color="grey", lw=0.8, ls=":", label="T - sd")
    for share in EQUAL:
        ax.axvline(share, color="lightgrey", lw=0.8)
    ax.set_xlabel("seconds, x the tuned baseline's (interleaved step timing)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{summary['suite']}: accuracy against seconds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def report(records: list[dict], timing_: dict[str, Any], out: Path, name: str, n: int, reference: int) -> dict:
    summary = summarise(records, timing_, name, n, reference)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "table.md").write_text(table(summary))
    plot(summary, out / "accuracy_vs_seconds.png")
    return summary
