"""``advise``'s prediction and branch trial against the whole runs the frontier measured, on any frontier suite.

``python -m benchmarks advise SUITE [--stage run|report|all] [--trial]``: the user's recipe (plain at the recipe's
batch and LR, the suite's reference epochs), 3 seeds, with ``advise`` called on the live model at its start and at
25, 50 and 75% of the run (its seconds left out of the run's): the priced range of each option (top-k at keep 0.25
and 0.5; the smaller batches), and with ``--trial`` the branch trial (each option trained on its own copy of the model
and of the live optimizer for ``TRIAL`` loader batches, the last ``PROBE`` training samples left out as its probe).
The report sets each option beside the speed-up the suite's frontier record measured over whole runs at the user's LR
(the user's priced seconds to the user's accuracy over the option's, read along its epochs): inside, above or below
the range, and whether the recommendation agrees. The record goes to ``--out`` (default: an ``advise`` folder in
``benchmarks/results/``, one folder per suite); none is kept, and the retired ``calibration`` record that asked the
same (last at commit ``35a2266``) is listed in ``benchmarks/README.md``'s "Retired records".
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

import torch

from benchmarks.domains import domain as domain_named
from benchmarks.lab._sb import Candidates, CostTable, Measurement, Training, advise
from benchmarks.lab.arm import Arm
from benchmarks.lab.batches import Batches
from benchmarks.lab.domain import Data, Domain
from benchmarks.lab.loop import Job, run_loop
from benchmarks.lab.read import reach
from benchmarks.lab.records import RESULTS, machine, read_jsonl, table, write_json, write_report
from benchmarks.lab.run import train_run
from benchmarks.lab.timing import setup

from .frontier_report import priced  # the frontier's records, priced as its report prices them
from .frontier_suites import SUITES as FRONTIER

SUITES = ("scratch-cnn", "scratch-mlp", "scratch-noisy", "scratch-wide", "fashion-cnn")
POINTS = (0.0, 0.25, 0.5, 0.75)
KEEPS = (0.25, 0.5)
STEPS, TRIAL, PROBE = 16, 1024, 2048
ORDER = 7_919  # the advisor reads the training set in an order of its own
SEEDS = (0, 1, 2)


def advisor(dom: Domain, family: str, data: Data, seed: int, trial: int, fixed: bool) -> Any:
    """``inspect(model, optimizer)`` for ``train_run``: ``advise`` on the live model (with the live optimizer where
    ``trial``) over the training set less the probe; a record of its ranges, trial and recommendation."""
    fields = tuple(t[:-PROBE] for t in data.train) if trial else data.train
    held = torch.arange(data.size - PROBE, data.size)
    probe = [dom.batch(data.train, index, False) for index in held.split(256)] if trial else None
    calls = [0]

    def inspect(model: Any, optimizer: Any) -> dict[str, Any]:
        loader = Batches(dom, fields, dom.recipes[family]["batch"], seed + ORDER)
        loader.set_epoch(calls[0])
        calls[0] += 1
        training = Training(optimizer=optimizer) if trial else Training(
            make_optimizer=lambda m: dom.optimizer(m, dom.recipes[family], dom.recipes[family]["lr"]))  # fmt: skip
        measurement = Measurement(steps=min(STEPS, len(loader)), trial_steps=trial, probe=probe,
                                  costs=CostTable.forward_equivalents() if fixed else None)  # fmt: skip
        advice = advise(loader, model, training=training, candidates=Candidates(keeps=KEEPS),
                        measurement=measurement, **dom.sb_options())  # fmt: skip
        rows = [{k: v for k, v in row.items() if k in ("option", "keep", "cache", "low", "high", "measured")}
                for row in advice.rows]  # fmt: skip
        return {"tau": advice.tau, "score_share": advice.score_share, "rows": rows, "choice": advice.choice,
                "recommendation": advice.recommendation, "trial_steps": advice.trial_steps}  # fmt: skip

    return inspect


def run(name: str, out: Path, smoke: bool, trial: bool, fixed: bool, info: dict[str, Any]) -> None:
    """The user's run of suite ``name`` per seed, with ``advise`` at :data:`POINTS`; into ``out/<name>/runs.jsonl``."""
    suite = FRONTIER[name]
    dom = domain_named(suite.domain)
    data = dom.data(smoke=smoke, **suite.data)
    recipe = dom.recipes[suite.family]
    epochs, seeds, steps = (2, (0,), 16) if smoke else (suite.reference_epochs, SEEDS, TRIAL)
    user = Arm("user", recipe["batch"], recipe["lr"])

    def job(seed: int) -> Job:
        def train() -> dict[str, Any]:
            inspect = advisor(dom, suite.family, data, seed, steps if trial else 0, fixed)
            record = train_run(dom, suite.family, data, user, epochs=epochs, seed=seed, inspect=inspect,
                               inspect_at=POINTS)  # fmt: skip
            return {**record, "arm": "trial" if trial else "user", "suite": name, "fixed_costs": fixed}

        return Job(("trial" if trial else "user", seed), train)

    def line(r: dict[str, Any]) -> None:
        said = "; ".join(f"{i['at']:g}: {i['choice']}" for i in r["inspections"])
        print(f"{name} seed={r['seed']} {r['arm']}: {said}", flush=True)

    folder = out / name
    run_loop((job(s) for s in seeds), folder / "runs.jsonl", lambda r: (r["arm"], r["seed"]), log=line)
    write_json(folder / "machine.json", {**machine(), **info, "suite": name, "points": POINTS, "keeps": KEEPS,
                                         "steps": STEPS, "trial": steps if trial else 0,
                                         "fixed_costs": fixed})  # fmt: skip


def measured(name: str, frontier: Path) -> dict[str, float | None]:
    """Per option, the frontier record's whole-run speed-up at the user's LR: the user's recipe's priced seconds to
    its accuracy over the option's (its configurations at the user's batch, or the smaller batch's plain runs, read
    along their epochs; None: never)."""
    suite = FRONTIER[name]
    dom = domain_named(suite.domain)
    recipe = dom.recipes[suite.family]
    timing = json.loads((frontier / name / "timing.json").read_text())
    samples = json.loads((frontier / name / "machine.json").read_text())["data"]["samples"]
    runs = [r for r in priced(read_jsonl(frontier / name / "runs.jsonl"), timing["kinds"], samples)
            if math.isclose(r["config"]["lr"], recipe["lr"])]  # fmt: skip
    key, b = dom.metric.key, recipe["batch"]

    def curve(family: str, batch: int) -> list[tuple[float, float]]:
        by: dict[int, list[dict]] = {}
        for r in runs:
            if r["family_arm"] == family and r["config"]["batch"] == batch:
                by.setdefault(r["epochs"], []).append(r)
        signed = dom.metric.signed
        return sorted((statistics.fmean(r["seconds"] for r in v), statistics.fmean(signed(r[key]) for r in v))
                      for v in by.values())  # fmt: skip

    user = [r for r in runs if r["family_arm"] == "plain" and r["config"]["batch"] == b
            and r["epochs"] == suite.reference_epochs]  # fmt: skip
    if not user:
        return {}
    seconds = statistics.fmean(r["seconds"] for r in user)
    target = statistics.fmean(dom.metric.signed(r[key]) for r in user)
    options = {f"top-k {k}": ("topk-" + str(k), b) for k in KEEPS} | {f"random {k}": (f"random-{k}", b) for k in KEEPS}
    options |= {f"smaller batch {math.ceil(k * b)}": ("plain", math.ceil(k * b)) for k in KEEPS}
    out: dict[str, float | None] = {}
    for option, (family, batch) in options.items():
        points = curve(family, batch)
        if not points:
            continue
        mine = reach(points, target - 1e-12)
        out[option] = None if mine is None else seconds / mine
    return out


def report(out: Path, frontier: Path) -> dict[str, Any]:
    """``out/report/table.md``: per suite, each option's integrated predicted range (the mean over the points),
    the range at 25% of the run, the measured whole-run speed-up and where it falls; the branch trial's
    recommendations and their agreement with the whole runs."""
    lines = ["# advise against the whole runs (speed-ups: the user's seconds over the option's, above 1 pays)", ""]
    summary: dict[str, Any] = {}
    for name in SUITES:
        records = read_jsonl(out / name / "runs.jsonl")
        if not records or not (frontier / name / "timing.json").exists():
            continue
        whole = measured(name, frontier)
        rows = []
        for option in whole:
            lows, highs = [], []
            for r in (r for r in records if r["arm"] == "user"):
                for point in r["inspections"]:
                    row = next((x for x in point["rows"] if _same(x, option)), None)
                    if row is not None:
                        lows.append(row["low"])
                        highs.append(row["high"])
            if not lows:
                continue
            low, high, value = statistics.fmean(lows), statistics.fmean(highs), whole[option]
            where = "never reached" if value is None else "inside" if low <= value <= high else (
                "above" if value > high else "below")  # fmt: skip
            rows.append([option, f"{low:.2f}-{high:.2f}", "never" if value is None else f"{value:.2f}", where])
        lines += [f"## {name}", "", *table(["option", "predicted (integrated)", "measured, whole runs", "where"], rows),
                  ""]  # fmt: skip
        trials = [r for r in records if r["arm"] == "trial"]
        if trials:
            calls = [(i["at"], i["choice"]) for r in trials for i in r["inspections"]]
            agree = [_agrees(choice, whole) for _, choice in calls]
            judged = [a for a in agree if a is not None]
            lines += [f"Branch trial ({trials[0]['inspections'][0]['trial_steps']} loader batches per option): named "
                      + "; ".join(f"{at:g}: {choice}" for at, choice in calls)
                      + f". Agrees with the whole runs on {sum(judged)} of {len(judged)} judged calls.",
                      ""]  # fmt: skip
        summary[name] = {"measured": whole, "rows": rows}
    write_report(out / "report", summary, lines)
    return summary


def _same(row: dict[str, Any], option: str) -> bool:
    if option.startswith("smaller batch"):
        return row["option"] == option
    keep = float(option.split()[-1])
    return row["keep"] == keep and not row["cache"] and not row["option"].startswith("smaller")


def _agrees(choice: str, whole: dict[str, float | None]) -> bool | None:
    """Whether a named option agrees with the whole runs: top-k named where a top-k option won (above 1), whole batches
    where none of top-k and the smaller batches did, a smaller batch where it won; None where not judged."""
    wins = {option for option, v in whole.items() if v is not None and v > 1 and not option.startswith("random")}
    if choice == "no selection":
        return not wins
    if choice.startswith("smaller batch") or choice.startswith("top-k") or "keep" in choice:
        family = "smaller batch" if choice.startswith("smaller") else "top-k"
        return any(option.startswith(family) for option in wins)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks advise", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("suite", nargs="?", choices=SUITES, help="one suite (default: every suite)")
    parser.add_argument("--stage", choices=["run", "report", "all"], default="all")
    parser.add_argument("--trial", action="store_true", help=f"the branch trial too ({TRIAL} batches an option)")
    parser.add_argument("--smoke", action="store_true", help="seconds: tiny data, one seed, 2 epochs, 16 batches")
    parser.add_argument("--fixed-costs", action="store_true", help="advise prices by forward-equivalents, untimed")
    parser.add_argument("--out", type=Path, default=RESULTS / "advise", help="the record's folder")
    parser.add_argument("--frontier", type=Path, default=RESULTS / "frontier", help="the frontier records read")
    args = parser.parse_args(argv)
    info = setup()
    if args.stage in ("run", "all"):
        for name in [args.suite] if args.suite else SUITES:
            run(name, args.out, args.smoke, args.trial, args.fixed_costs, info)
    if args.stage in ("report", "all"):
        report(args.out, args.frontier)
    return 0
