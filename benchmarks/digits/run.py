"""A suite nobody tuned on: scikit-learn's 8x8 digits, a small CNN, the user's recipe against selection and auto.

Stages: ``all`` (default), ``run``, ``report``, ``trial``, ``trial-report``. The suite and its arms: ``arms.py``;
commands and records: ``benchmarks/digits/README.md``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.harness.branch_trials import TRIAL
from benchmarks.harness.records import machine, results_dir
from benchmarks.harness.runs import Job, cli, run_loop
from benchmarks.harness.timing import cpu_clock, rotated, setup
from benchmarks.harness.train import constant, train_run

from .arms import RECIPE, DigitsArm, arms, digits, model

RESULTS = results_dir("digits") / "main"  # benchmarks/results/<benchmark>/<suite>/
EPOCHS, EVALS, SEEDS = 25, 50, (0, 1, 2)
SMOKE_EPOCHS, SMOKE_EVALS, SMOKE_SEEDS = 2, 8, (0, 1)


def run(out: Path, seeds: tuple[int, ...], epochs: int, evals: int, info: dict) -> list[dict]:
    """Every (seed, arm) not yet in ``out/runs.jsonl``, per seed every arm in turn (rotating); returns all records."""
    data = digits()

    def job(arm: DigitsArm, seed: int) -> Job:
        def train() -> dict:
            record = train_run(
                data, arm, family="digits", epochs=epochs, seed=seed, evals=evals, clock=cpu_clock,
                schedule=constant, build_model=model, recipe=RECIPE,
            )  # fmt: skip
            record.update(suite="digits", samples=len(data.y_train), time=time.time(), load=os.getloadavg())
            return record

        return Job((arm.name, seed), train)

    def jobs() -> Iterator[Job]:
        for seed in seeds:
            for arm in rotated(arms(), seed):
                yield job(arm, seed)

    def line(r: dict) -> None:
        print(f"digits seed={r['seed']} {r['arm']:<12} acc={r['accuracy']:.4f} s={r['seconds']:.2f}", flush=True)

    out.mkdir(parents=True, exist_ok=True)
    records = run_loop(jobs(), out / "runs.jsonl", lambda r: (r["arm"], r["seed"]), log=line)
    (out / "machine.json").write_text(
        json.dumps({**machine(), **info, "suite": "digits", "load_after": os.getloadavg()}, indent=2)
    )
    return records


def main(argv: list[str] | None = None) -> int:
    """Run the digits suite and/or its report (see the module docstring); returns the exit status."""
    parser = cli("digits", __doc__, smoke="2 epochs, 8 evaluations, seeds 0 and 1")
    parser.add_argument("stage", nargs="?", default="all", choices=["all", "run", "report", "trial", "trial-report"])
    parser.add_argument("--out", type=Path, help="results folder (default results/digits/main; trial stages: trial)")
    parser.add_argument("--seeds", help="comma-separated seeds (default 0,1,2)")
    args = parser.parse_args(argv)
    if args.stage in ("trial", "trial-report"):
        from . import trial

        out = args.out if args.out is not None else trial.TRIAL_RESULTS
        if args.stage == "trial":
            smoke = args.smoke
            chosen: tuple[int, ...] = trial.SMOKE_SEEDS if smoke else trial.SEEDS
            if args.seeds:
                chosen = tuple(int(s) for s in args.seeds.split(","))
            length, steps = (trial.SMOKE_EPOCHS, trial.SMOKE_TRIAL) if smoke else (EPOCHS, TRIAL)
            trial.run_trial(out, chosen, length, steps, smoke, {**setup(), "load_before": os.getloadavg()})
        trial.trial_report(out, RESULTS)
        return 0
    args.out = args.out if args.out is not None else RESULTS
    epochs, evals, seeds = (SMOKE_EPOCHS, SMOKE_EVALS, SMOKE_SEEDS) if args.smoke else (EPOCHS, EVALS, SEEDS)
    if args.seeds:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    if args.stage in ("all", "run"):
        info = setup()
        run(args.out, seeds, epochs, evals, {**info, "load_before": os.getloadavg()})  # type: ignore[arg-type]
    if args.stage in ("all", "report"):
        from .report import report

        report(args.out)
    return 0
