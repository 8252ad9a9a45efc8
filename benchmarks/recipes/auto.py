"""``keep="auto"``: does it keep the user's accuracy where selection hurts, and its gains where selection pays?

``python -m benchmarks auto [SUITE] [--stage run|report|all]``: every suite's arms (the user's recipe, top-k at keep
0.25, ``keep="auto"`` not told the run's length and told it in epochs), 3 seeds, then one report over every suite:
accuracy per seed against the user's, what auto decided, and its speed against the tuned frontier read from the
frontier's ``auto-epochs`` arm (the one baseline every claim reads). Suites: :data:`SUITES`; the records go to
``--out`` (default ``benchmarks/results/auto/``: ``<suite>/runs.jsonl``, ``report/table.md``); the kept ones are
listed in ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.domains import domain as domain_named
from benchmarks.lab.arm import Arm
from benchmarks.lab.loop import Job, run_loop
from benchmarks.lab.records import RESULTS, machine, ratio, read_jsonl, table, write_json, write_report
from benchmarks.lab.run import train_run
from benchmarks.lab.timing import rotated, setup

SEEDS = (0, 1, 2)
OUT = RESULTS / "auto"
ARMS = ("user", "topk-0.25", "auto", "auto-epochs")


@dataclass(frozen=True)
class AutoSuite:
    """One suite: the domain's data and family, the user's recipe for ``epochs``.

    Attributes:
        harm: a run where selection hurts: auto must keep the user's accuracy (untold: exactly, no trial; told:
            within :data:`TOLERANCE` points). Else a run where selection paid in the recorded ``before`` record:
            auto told the run keeps that record's gains (its selected share and accuracy).
        before: the record auto's gains are read against (``results/auto/<before>/<suite>/runs.jsonl``, its
            ``auto-topk`` arm), or None.
    """

    name: str
    domain: str
    family: str
    epochs: int
    data: dict[str, Any] = field(default_factory=dict)
    harm: bool = False
    before: str | None = None


TOLERANCE = 0.5  # points of accuracy
SUITES = {s.name: s for s in (
    AutoSuite("short-noisy", "mnist1d", "cnn", 6, {"samples": 20_000, "noise": 0.3}, harm=True),  # 378 batches
    AutoSuite("cnn100k", "mnist1d", "cnn", 8, {"samples": 100_000}, before="evals32"),
    AutoSuite("mlp100k", "mnist1d", "mlp", 16, {"samples": 100_000}, before="evals32"),
    AutoSuite("noisy100k", "mnist1d", "cnn", 8, {"samples": 100_000, "noise": 0.2}, before="evals32"),
    AutoSuite("noisy30-100k", "mnist1d", "cnn", 8, {"samples": 100_000, "noise": 0.3}, before="evals32"),
    AutoSuite("digits", "digits", "cnn", 25, harm=False),
)}  # fmt: skip
FRONTIER = ("scratch-wide", "scratch-cnn", "scratch-noisy", "scratch-mlp", "continued", "continued-lm", "fashion-cnn")


def arms(recipe: dict[str, Any]) -> list[Arm]:
    b, lr = recipe["batch"], recipe["lr"]
    return [Arm("user", b, lr), Arm("topk-0.25", b, lr, "topk", 0.25), Arm("auto", b, lr, "topk", "auto"),
            Arm("auto-epochs", b, lr, "topk", "auto", told=True)]  # fmt: skip


def run(suite: AutoSuite, out: Path, smoke: bool, info: dict[str, Any], only: tuple[str, ...] = ARMS) -> None:
    """Every (seed, arm) of ``suite`` not yet in ``out/<suite>/runs.jsonl``, per seed every arm in turn (rotating);
    ``only``: these arms (names from :data:`ARMS`)."""
    dom = domain_named(suite.domain)
    data = dom.data(smoke=smoke, **suite.data)
    epochs, seeds = (2, (0,)) if smoke else (suite.epochs, SEEDS)
    mine = [arm for arm in arms(dom.recipes[suite.family]) if arm.name in only]

    def job(arm: Arm, seed: int) -> Job:
        def train() -> dict[str, Any]:
            record = train_run(dom, suite.family, data, arm, epochs=epochs, seed=seed)
            return {**record, "arm": arm.name, "suite": suite.name, "time": time.time()}

        return Job((arm.name, seed), train)

    def line(r: dict[str, Any]) -> None:
        auto = r.get("auto", {})
        print(f"{suite.name} seed={r['seed']} {r['arm']:<12} acc={r['acc_mix']:.4f} "
              f"on-share={auto.get('on_share', float('nan')):.2f}", flush=True)  # fmt: skip

    folder = out / suite.name
    jobs = (job(arm, seed) for seed in seeds for arm in rotated(mine, seed))
    run_loop(jobs, folder / "runs.jsonl", lambda r: (r["arm"], r["seed"]), log=line)
    write_json(folder / "machine.json", {**machine(), **info, "suite": suite.name, "domain": dom.name,
                                         "kind": dom.kind, "data": data.description, "epochs": epochs})  # fmt: skip


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def report(out: Path, frontier: Path = RESULTS / "frontier") -> dict[str, Any]:
    """``out/report/table.md``: per suite and arm, accuracy per seed against the user's, auto's selected share and
    decisions, the verdict; then auto's speed against the tuned frontier (each frontier suite's ``auto-epochs``
    ratio beside the best fixed selection family's)."""
    lines = ["# keep='auto': the user's accuracy where selection hurts, its gains where it pays", ""]
    summary: dict[str, Any] = {"suites": {}, "frontier": {}}
    for suite in SUITES.values():
        records = read_jsonl(out / suite.name / "runs.jsonl")
        if not records:
            continue
        dom = domain_named(suite.domain)
        seeds = sorted({r["seed"] for r in records})
        by = {(r["arm"], r["seed"]): r for r in records}
        user = [by[("user", s)]["acc_mix"] for s in seeds if ("user", s) in by]
        lines += [f"## {suite.name} ({dom.name}, {dom.kind} data; {suite.family}, {suite.epochs} epochs, {suite.data})",
                  ""]  # fmt: skip
        rows, verdicts = [], {}
        for arm in ARMS:
            accs = [by[(arm, s)]["acc_mix"] if (arm, s) in by else None for s in seeds]
            shares = [by[(arm, s)].get("auto", {}).get("on_share") for s in seeds if (arm, s) in by]
            read = [a for a in accs if a is not None]
            gap = 100 * (_mean(read) - _mean(user))
            rows.append([arm, *(f"{100 * a:.2f}" if a is not None else "-" for a in accs), f"{100 * _mean(read):.2f}",
                         f"{gap:+.2f}", "" if not shares or shares[0] is None else f"{_mean(shares):.3f}",
                         "; ".join(_decisions(by[(arm, s)]) for s in seeds
                                   if (arm, s) in by and "auto" in by[(arm, s)])])  # fmt: skip
            verdicts[arm] = {"accuracy": read, "gap": gap, "on_share": shares}
        lines += table(["arm", *(f"seed {s} %" for s in seeds), "mean %", "to the user's", "selected share",
                        "decisions (step: on/off, keep)"], rows)  # fmt: skip
        said = _verdict(suite, verdicts, user, out)
        lines += ["", *(f"- {v}" for v in said), ""]
        summary["suites"][suite.name] = {"arms": verdicts, "verdicts": said}
    lines += ["## Speed: keep='auto' told the run, against the tuned frontier", "",
              "From each frontier suite's record (`benchmarks/results/frontier/<suite>/summary.json`): the seed-mean "
              "ratio of `auto-epochs` (keep='auto' told the run's length in epochs) at each budget, beside the best "
              "fixed selection family's there (below 1 pays; never: it does not reach the frontier).", ""]  # fmt: skip
    rows = []
    for name in FRONTIER:
        path = frontier / name / "summary.json"
        if not path.exists():
            continue
        read = json.loads(path.read_text())["read_at_budget"]
        cells = [name]
        for row in read:
            if row is None:
                cells.append("n/a")
                continue
            fixed = [(v, f) for f, v in row["ratios"].items() if v is not None and f not in ("plain", "auto-epochs",
                                                                                           "random-0.25")]  # fmt: skip
            best = f"{min(fixed)[1]} {min(fixed)[0]:.2f}" if fixed else "none reaches it"
            cells.append(f"{ratio(row['ratios'].get('auto-epochs'))} (best fixed: {best})")
        rows.append(cells)
        summary["frontier"][name] = read
    lines += table(["suite", "0.25x", "0.5x", "1x"], rows)
    write_report(out / "report", summary, lines)
    return summary


def _decisions(record: dict[str, Any]) -> str:
    history = record["auto"]["history"]
    shown = ", ".join(f"{int(d[0])}: {'on' if d[1] else 'off'} {d[2]:g}" for d in history[:4])
    return (shown + (f", ... ({len(history)})" if len(history) > 4 else "")) or "no trial"


def _verdict(suite: AutoSuite, arms: dict[str, Any], user: list[float], out: Path) -> list[str]:
    """The suite's targets, met or missed, with their figures."""
    out_lines = []
    untold, told = arms["auto"], arms["auto-epochs"]
    if suite.harm:
        same = untold["accuracy"] == user
        out_lines.append(f"untold: {'met' if same else 'missed'}: exactly the user's accuracy on every seed "
                         f"({untold['gap']:+.2f} points; no trial without the run's length)")  # fmt: skip
        out_lines.append(f"told: {'met' if told['gap'] >= -TOLERANCE else 'missed'}: {told['gap']:+.2f} points "
                         f"(target: within {TOLERANCE})")  # fmt: skip
    if suite.before is not None:
        before = [r for r in read_jsonl(out / suite.before / suite.name / "runs.jsonl") if r["arm"] == "auto-topk"]
        if before:
            acc, share = _mean([r["accuracy"] for r in before]), _mean([r["auto"]["on_share"] for r in before])
            mine, mine_share = _mean(told["accuracy"]), _mean([v for v in told["on_share"] if v is not None])
            kept = mine >= acc - 0.0005 and mine_share >= share - 0.01
            out_lines.append(f"told, against the `{suite.before}` record's auto (made before the no-trial rule): "
                             f"accuracy {100 * mine:.2f}% against {100 * acc:.2f}%, selected share {mine_share:.3f} "
                             f"against {share:.3f}: gains {'kept' if kept else 'not kept'}")  # fmt: skip
    return out_lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks auto", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("suite", nargs="?", choices=sorted(SUITES), help="one suite (default: every suite)")
    parser.add_argument("--stage", choices=["run", "report", "all"], default="all")
    parser.add_argument("--smoke", action="store_true", help="seconds: tiny data, one seed, 2 epochs")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the record's folder (default {OUT})")
    parser.add_argument("--frontier", type=Path, default=RESULTS / "frontier", help="the frontier records read")
    parser.add_argument("--arms", default=",".join(ARMS), help="'run': comma-separated arms (default: every arm)")
    args = parser.parse_args(argv)
    only = tuple(args.arms.split(","))
    if unknown := sorted(set(only) - set(ARMS)):
        parser.error(f"--arms: unknown {unknown}; the arms are {', '.join(ARMS)}")
    info = setup()
    if args.stage in ("run", "all"):
        for name in [args.suite] if args.suite else SUITES:
            run(SUITES[name], args.out, args.smoke, info, only)
    if args.stage in ("report", "all"):
        report(args.out, args.frontier)
    return 0
