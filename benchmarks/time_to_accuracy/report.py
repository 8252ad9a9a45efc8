"""Write what a suite measured: ``summary.json``, ``table.md`` and PNG plots (matplotlib, the ``bench`` extra)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.harness import plots as _plots
from benchmarks.harness import stats
from benchmarks.harness.arms import Arm
from benchmarks.harness.cost import step_kind, suite_arm_seconds
from benchmarks.harness.models import RECIPES
from benchmarks.harness.records import read_jsonl
from benchmarks.harness.stats import group, mean, or_never, paired_gap, percent, reach, sd

CONTROLS = ("baseline-small-batch", "random", "random-fixed")


def config_text(cfg: dict[str, Any]) -> str:
    """A short description of an arm's configuration."""
    if cfg["policy"] is None:
        return f"batch keep*B (keep={cfg['keep']})" if cfg["small_batch"] else "batch B"
    policy = f"reducible/{cfg['base']}" if cfg["policy"] == "reducible" else cfg["policy"]
    layout = ("fixed B, wide" if cfg["candidates"] == "wide" else "fixed B") if cfg["pooled"] else "shrink"
    window = "always" if cfg["start"] is None else f"{cfg['start']}-{cfg['end']}, interrupt {cfg['interrupt']}"
    mode = ", train-mode scoring" if cfg["score_mode"] == "train" else ""
    cache = ""
    if cfg.get("staleness") is not None:
        cache = f", LossCache(staleness={cfg['staleness']}){' + observe' if cfg.get('observe') else ''}"
    return f"{policy} keep={cfg['keep']}, {layout}, {window}{mode}{cache}"


def suite_table(summary: dict[str, Any]) -> str:
    """The headline table and the per-budget table of one suite, as Markdown."""
    ref = summary["reference_cost"]
    lines = [
        f"Target: the baseline's final accuracy at {summary['reference_epochs']} epochs, "
        f"**{100 * summary['target_accuracy']:.2f}%** (seed mean), costing {ref['fe'] / 1e6:.2f}M FE and "
        f"{ref['seconds']:.1f} s (median). Equal-cost comparison at {summary['equal_cost_fe'] / 1e6:.2f}M FE "
        f"({summary['equal_cost_fe'] / ref['fe']:.2f}x the baseline's).",
        "",
        "| arm | configuration | FE to target (x base) [per seed] | seconds to target, interleaved timing (x base) "
        "| seconds to target, raw runs (x base) | first crossing in one run (FE, s) | acc. at equal FE (%) "
        "| vs small-batch (pp) | vs random (pp) | final acc. at largest budget (%) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm, row in summary["arms"].items():
        seeds = ", ".join("never" if v is None else f"{v:.2f}" for v in row["reach_fe_seeds"])
        timed = "n/a"
        if "reach_timed" in row:
            timed = f"{or_never(row['reach_timed'])} ({row['timed_epoch_ratio']:.2f}x per epoch)"
        gaps = []
        for control in ("baseline-small-batch", "random"):
            gap = None if arm == control else paired_gap(summary, arm, control)
            gaps.append("" if gap is None else f"{gap['mean']:+.2f} [{gap['min']:+.2f}, {gap['max']:+.2f}]")
        lines.append(
            f"| {arm} | {config_text(row['config'])} | {or_never(row['reach_fe'], how=row['reach_fe_how'])} "
            f"[{seeds}] | {timed} | {or_never(row['reach_seconds'], how=row['reach_seconds_how'])} | "
            f"{or_never(row['first_fe'])}, {or_never(row['first_seconds'])} | "
            f"{percent(row['equal_cost_mean'], row['equal_cost_sd'])} | {gaps[0]} | {gaps[1]} | "
            f"{percent(row['final_accuracy'], row['final_sd'])} |"
        )
    lines += [
        "",
        "Per budget (each a separate annealed run; seconds are min / median / max over seeds):",
        "",
        "| arm | epochs | FE (x base) | accuracy (%) | seconds | trained samples with a flipped label |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for arm, row in summary["arms"].items():
        for b in row["budgets"]:
            secs = " / ".join(f"{s:.1f}" for s in b["seconds"])
            noisy = "" if b["noisy_share"] != b["noisy_share"] else f"{100 * b['noisy_share']:.1f}%"
            lines.append(
                f"| {arm} | {b['epochs']} | {b['fe_ratio']:.2f} | {percent(b['accuracy_mean'], b['accuracy_sd'])} "
                f"({b['n']} seeds) | {secs} | {noisy} |"
            )
    return "\n".join(lines) + "\n"


def cache_table(records: list[dict[str, Any]]) -> str:
    """For suites with ``LossCache`` arms: the share of SB samples scored and the accuracy, at the epochs where the
    cached arms and the freshly scoring arm all ran (the fresh arm's largest budget)."""
    by = group(records)
    configs = {arm: budgets[max(budgets)][0]["config"] for arm, budgets in by.items()}
    fresh = next((arm for arm, cfg in configs.items() if cfg["policy"] and cfg.get("staleness") is None), None)
    if fresh is None:
        return ""
    epochs = max(by[fresh])
    lines = [
        f"Loss cache against fresh scoring ({fresh}), all at {epochs} epochs (3 seeds): the share of the SB steps' "
        "samples that went through the scoring forward, and the final accuracy.",
        "",
        "| arm | samples scored (share of SB samples) | scoring forwards saved | accuracy (%) [per seed] "
        "| FE (x fresh) |",
        "| --- | --- | --- | --- | --- |",
    ]
    base_fe = mean([r["fe"] for r in by[fresh][epochs]])
    for arm, budgets in by.items():
        runs = budgets.get(epochs)
        if not runs or runs[0]["config"]["policy"] is None:
            continue
        shares = [r["samples_scored"] / max(1, r["samples_scored"] + r.get("samples_reused", 0)) for r in runs]
        accs = [r["accuracy"] for r in runs]
        seeds = ", ".join(f"{100 * a:.2f}" for a in accs)
        lines.append(
            f"| {arm} | {mean(shares):.3f} | {1 - mean(shares):.0%} | {percent(mean(accs), sd(accs))} [{seeds}] | "
            f"{mean([r['fe'] for r in runs]) / base_fe:.2f} |"
        )
    return "\n".join(lines) + "\n"


def add_priced_seconds(summary: dict[str, Any], records: list[dict[str, Any]], timing_path: Path) -> None:
    """Seconds to target from interleaved step timings (the throughput benchmark): epochs to target (interpolated on the
    budget curve) times the arm's seconds per epoch, plus its up-front seconds; as a ratio to the baseline's."""
    if not timing_path.exists():
        return
    family, samples = records[0]["family"], records[0]["samples"]
    timing = json.loads(timing_path.read_text())["families"].get(family)
    if timing is not None and "steps" in timing:  # the throughput benchmark's layout, with the cost model's predictions
        timing = timing["steps"]
    kinds = {step_kind(Arm(name, **row["config"])) for name, row in summary["arms"].items()}
    if timing is None or not kinds <= set(timing) | {"plain batch B"}:
        return  # not every arm's step was timed: no partial column
    train, batch = int(0.8 * samples), RECIPES[family]["batch"]
    priced = {}
    for name, row in summary["arms"].items():
        per_epoch, upfront = suite_arm_seconds(Arm(name, **row["config"]), timing, train, batch)
        epochs, _ = reach([(b["epochs"], b["accuracy_mean"]) for b in row["budgets"]], summary["target_accuracy"])
        priced[name] = (per_epoch, upfront, None if epochs is None else epochs * per_epoch + upfront)
    base_per_epoch, base_upfront, _ = priced[summary["reference"]]
    base = summary["reference_epochs"] * base_per_epoch + base_upfront
    summary["timed_reference_seconds"] = base
    for name, (per_epoch, upfront, seconds) in priced.items():
        summary["arms"][name]["timed_seconds_per_epoch"] = per_epoch
        summary["arms"][name]["timed_upfront_seconds"] = upfront
        summary["arms"][name]["timed_epoch_ratio"] = per_epoch / base_per_epoch
        summary["arms"][name]["reach_timed"] = None if seconds is None else seconds / base


def write_suite(records: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    summary = stats.summarise(records)
    add_priced_seconds(summary, records, out.parents[1] / "throughput" / "main" / "summary.json")
    summary["gaps"] = {
        arm: {c: paired_gap(summary, arm, c) for c in CONTROLS if c in summary["arms"] and c != arm}
        for arm in summary["arms"]
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    table = suite_table(summary)
    if any(r["config"].get("staleness") is not None for r in records):
        table += "\n" + cache_table(records)
    (out / "table.md").write_text(table)
    _plots.suite_plots(records, summary, out)
    return summary


def write_sweep(records: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """Efficiency of every sweep configuration against the baseline's budget curve; picks each policy's best.

    Efficiency at a budget is the FE the baseline needs for the same accuracy (its budget curve interpolated)
    divided by the configuration's FE; ">" marks a lower bound (beyond the baseline's best measured accuracy) and
    "<=" an upper bound (below the baseline's cheapest measured budget).
    """
    arms = group(records)
    base = stats.budget_curve(arms["baseline"], "fe")
    rows, best = [], {}
    for arm, by_epochs in arms.items():
        effs = []
        for epochs, runs in by_epochs.items():
            acc, fe = runs[0]["accuracy"], runs[0]["fe"]
            cost, how = reach(base, acc)
            bound = {"never": ">", "at or below": "<="}.get(how, "")
            cost = max(c for c, _ in base) if how == "never" else cost
            effs.append({"epochs": epochs, "accuracy": acc, "fe": fe, "efficiency": cost / fe, "bound": bound})
        rows.append({"arm": arm, "config": by_epochs[max(by_epochs)][0]["config"], "budgets": effs})
        cfg = rows[-1]["config"]
        if cfg["policy"] in ("topk", "rank", "history"):
            key = cfg["policy"] + ("" if cfg["pooled"] else "-shrink")
            score = (effs[-1]["efficiency"], effs[0]["efficiency"])
            if key not in best or score > best[key][0]:
                best[key] = (score, {"keep": cfg["keep"], "start": cfg["start"], "pooled": cfg["pooled"]})
    chosen = {k: v[1] for k, v in best.items()}
    (out / "best.json").write_text(json.dumps(chosen, indent=1))
    (out / "summary.json").write_text(json.dumps({"rows": rows, "best": chosen}, indent=1))
    ref_fe = max(c for c, _ in base)
    width = max(len(row["budgets"]) for row in rows)
    lines = [
        "Each cell: epochs: accuracy % / FE (x the baseline's at its largest budget) / efficiency (the baseline's FE "
        "for the same accuracy over this FE; > marks a lower bound, <= an upper bound).",
        "",
        "| configuration |" + " budget |" * width,
        "| --- |" + " --- |" * width,
    ]
    for row in rows:
        cells = [
            f"e{b['epochs']}: {100 * b['accuracy']:.2f} / {b['fe'] / ref_fe:.2f} / {b['bound']}{b['efficiency']:.2f}"
            for b in row["budgets"]
        ]
        lines.append(f"| {row['arm']} | " + " | ".join(cells) + " |" * (width - len(cells)) + " |")
    lines += ["", "Chosen: " + ", ".join(f"{k}: {v}" for k, v in chosen.items())]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    return {"rows": rows, "best": chosen}


def report_all(out: Path) -> None:
    """Rewrite every suite's outputs from its ``runs.jsonl``."""
    for folder in sorted(p for p in out.iterdir() if (p / "runs.jsonl").exists()):
        records = read_jsonl(folder / "runs.jsonl")
        (write_sweep if folder.name == "sweep" else write_suite)(records, folder)
        print(f"wrote {folder}")


__all__ = ["report_all", "suite_table", "write_suite", "write_sweep"]
