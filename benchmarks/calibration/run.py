"""Calibration: ``advise``'s predicted speed-up beside the measured speed-up of every fixed arm, per suite (issue 28).

Stages: ``all``, ``run SUITE``, ``report`` (the predicted side: ``advise`` called on the live plain run at its start,
25, 50 and 75%; the measured side read from the auto and time-to-accuracy records), and ``trial SUITE`` /
``trial-report`` (``advise``'s branch trial along the run: ``trial.py``). Commands and records:
``benchmarks/calibration/README.md``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch.nn.functional as F

from benchmarks.harness._sb import Candidates, Measurement, Training, advise
from benchmarks.harness.arms import BASELINE
from benchmarks.harness.branch_trials import FIXED, KEEPS, ORDER, POINTS, STEPS
from benchmarks.harness.data import ShuffledBatches, dataset, inputs_targets
from benchmarks.harness.models import RECIPES
from benchmarks.harness.records import machine, results_dir
from benchmarks.harness.runs import Job, cli, run_loop
from benchmarks.harness.suites import RECIPE_SUITES
from benchmarks.harness.timing import cpu_clock, setup
from benchmarks.harness.train import train_run, user_optimizer

from .report import SUITES as REPORTED  # what 'all' runs and report.py reads
from .report import report
from .trial import run_trials, trial_report

RESULTS = results_dir("calibration") / "main"
SUITES = RECIPE_SUITES  # name: (samples, family, label noise, epochs), as the auto benchmark trains them
SEEDS = (0, 1, 2)
SCORES = ("loss", "gradnorm")
SMOKE = {"samples": 2000, "epochs": 2, "seeds": (0,)}


def advisor(data: Any, family: str, seed: int, fixed: bool) -> Any:
    """``inspect(model, progress, optimizer)`` for ``train_run``: ``advise`` on the live model for every score, as a
    record (a fresh optimizer of the recipe's, as recorded)."""
    recipe = RECIPES[family]
    calls = [0]

    def inspect(model: Any, progress: float, optimizer: Any) -> dict[str, Any]:
        loader = ShuffledBatches(data.fields(), recipe["batch"], seed + ORDER)
        loader.set_epoch(calls[0])
        calls[0] += 1
        steps = min(STEPS, len(loader))  # the smoke run's loader has fewer batches than STEPS
        out: dict[str, Any] = {"steps": steps}
        for score in SCORES:
            advice = advise(
                loader, model, F.cross_entropy, split=inputs_targets,
                training=Training(make_optimizer=user_optimizer(recipe)),
                candidates=Candidates(keeps=KEEPS, score=score),
                measurement=Measurement(steps=steps, costs=FIXED if fixed else None,
                                        trial_steps=0),  # the priced range only: the branch trial is trial.py's stage
            )  # fmt: skip
            smaller = [row for row in advice.rows if row["option"].startswith("smaller batch")]
            rows = [row for row in advice.rows if row["keep"] in KEEPS and row not in smaller]
            out[score] = {
                "batch": advice.batch,
                "tau": advice.tau,
                "score_share": advice.score_share,
                "costs": asdict(advice.costs),
                "speedup": {str(row["keep"]): row["low"] for row in rows if not row["cache"]},
                "speedup_high": {str(row["keep"]): row["high"] for row in rows if not row["cache"]},
                "speedup_cached": {str(row["keep"]): row["low"] for row in rows if row["cache"]},
                "small_batch": {str(row["keep"]): [row["low"], row["high"]] for row in smaller},
                "recommendation": advice.recommendation,
            }
        return out

    return inspect


def run_suite(name: str, out: Path, smoke: bool, fixed: bool, info: dict[str, Any]) -> None:
    """The plain run of suite ``name`` per seed, with ``advise`` at ``POINTS``; appended to ``out/<name>/runs.jsonl``
    (a rerun continues)."""
    samples, family, noise, epochs = SUITES[name]
    seeds = SEEDS
    if smoke:
        samples, epochs, seeds = SMOKE["samples"], SMOKE["epochs"], SMOKE["seeds"]
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    data = dataset(samples, noise=noise)
    user = replace(BASELINE, name="user")  # the user's recipe: RECIPES[family], batch B, no selection

    def job(seed: int) -> Job:
        def run() -> dict[str, Any]:
            inspect = advisor(data, family, seed, fixed)
            record = train_run(
                data, user, family=family, epochs=epochs, seed=seed, evals=8, clock=cpu_clock,
                inspect=inspect, inspect_at=POINTS,
            )  # fmt: skip
            record.update(suite=name, samples=samples, noise=noise, fixed_costs=fixed, time=time.time())
            return record

        return Job(("user", seed), run)

    def line(r: dict[str, Any]) -> None:
        said = ", ".join(
            f"{i['at']:.2f}: {i['loss']['speedup']['0.25']:.2f}x/{i['gradnorm']['speedup']['0.25']:.2f}x"
            for i in r["inspections"]
        )
        print(f"{name} seed={r['seed']} acc={r['accuracy']:.4f} s={r['seconds']:.1f} keep 0.25 loss/gradnorm {said}")

    run_loop((job(seed) for seed in seeds), folder / "runs.jsonl", lambda r: (r["arm"], r["seed"]), log=line)
    settings = {"points": POINTS, "keeps": KEEPS, "scores": SCORES, "steps": STEPS, "fixed_costs": fixed}
    (folder / "machine.json").write_text(json.dumps({**machine(), "suite": name, **info, **settings}, indent=2))


def main(argv: list[str] | None = None) -> int:
    """Run a stage of the calibration benchmark (see the module docstring); returns the exit status."""
    parser = cli("calibration", __doc__, smoke="2,000 samples, 2 epochs, one seed")
    parser.add_argument("stage", choices=["all", "run", "report", "trial", "trial-report"])
    parser.add_argument("suite", nargs="?", choices=sorted(SUITES), help="the suite ('run' and 'trial' only)")
    out = "the record's folder (default results/calibration/main; the trial stages: results/calibration)"
    parser.add_argument("--out", type=Path, help=out)
    measured = "the recorded results read (default benchmarks/results: auto/, time_to_accuracy/)"
    parser.add_argument("--measured", type=Path, default=RESULTS.parents[1], help=measured)
    parser.add_argument("--fixed-costs", action="store_true", help="advise prices with a fixed cost table (FE)")
    parser.add_argument("--trial-steps", type=int, help="trial stages: loader batches per option (the ablation)")
    args = parser.parse_args(argv)
    if args.stage in ("trial", "trial-report"):
        out = args.out if args.out is not None else RESULTS.parent
        if args.stage == "trial-report":
            trial_report(out, args.measured, args.trial_steps)
            return 0
        if args.suite is None:
            parser.error("trial needs a suite: one of " + ", ".join(sorted(SUITES)))
        run_trials(args.suite, out, args.smoke, args.fixed_costs, setup(), args.trial_steps)
        return 0
    args.out = args.out if args.out is not None else RESULTS
    if args.stage == "report":
        report(args.out, args.measured)
        return 0
    info = setup()
    started = time.time()
    names = list(REPORTED) if args.stage == "all" else [args.suite]
    if names == [None]:
        parser.error("run needs a suite: one of " + ", ".join(sorted(SUITES)))
    for name in names:
        run_suite(name, args.out, args.smoke, args.fixed_costs, info)
    if args.stage == "all":
        report(args.out, args.measured, wall_seconds=time.time() - started)
    return 0
