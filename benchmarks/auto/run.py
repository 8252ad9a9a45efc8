"""Does selection pay? ``keep="auto"``, importance sampling and the fixed arms against the user's and the tuned recipe.

Exact commands (from the repository root; the recorded run's time is in benchmarks/README.md):

    python -m benchmarks auto all --jobs 2            # every suite, 3 seeds, the timing check, the report
    python -m benchmarks auto run cnn100k [--worker I/N]   # one suite (cnn100k, mlp100k, noisy100k)
    python -m benchmarks auto timing                  # cheap when off: auto (off, probes included) vs a plain loop
    python -m benchmarks auto lm [--jobs 2]           # the LM suite's arms (harness/lm_suite.py, tuned recipe reused)
    python -m benchmarks auto lm --arms baseline,auto --worker 0/1 --out benchmarks/results/auto/trials
                                                      # keep="auto"'s trials against the baseline (issue 28)
    python -m benchmarks auto report                  # tables, targets, plot -> benchmarks/results/auto/report
    python -m benchmarks auto all --smoke --jobs 1 --out /tmp/auto   # seconds; what CI runs

Suites (MNIST-1D, generated offline): ``cnn100k`` (the ConvNet, 100,000 samples, 8 epochs), ``mlp100k`` (the MLP, 16
epochs), ``noisy100k`` (the ConvNet with 20% of the training labels flipped); by ``run`` only, ``noisy30-100k`` (30%
flipped) and ``cnn20k-noisy30-short`` (20,000 samples, 30% flipped, 6 epochs: 378 loader batches). Arms (``arms.py``):
the user's recipe (batch 256), the tuned baseline (the pruning benchmark's tuned batch and LR), top-k and random at
keep 0.25, importance sampling by loss and by gradient norm at keep 0.25 (weighted, unbiased), and ``keep="auto"``
twice: on importance sampling by gradient norm (weighted; the estimate's own model) and as it comes (``auto-topk``:
top-k on the loss, every option at its default). Every arm trains the suite's epochs; runs are interleaved (per seed,
every arm in turn, rotating), appended to ``<out>/<suite>/runs.jsonl`` as they end (a rerun continues), and timed in
this thread's CPU seconds (two benchmark processes share the two cores; wall seconds of a run moved by 15-40% with
what ran beside it), with torch on one thread and the allocator pinned (``harness/timing.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.harness import lm_suite
from benchmarks.harness._sb import Auto
from benchmarks.harness.data import dataset
from benchmarks.harness.models import RECIPES
from benchmarks.harness.records import machine, results_dir, write_results
from benchmarks.harness.runs import Job, run_loop
from benchmarks.harness.suites import RECIPE_SUITES
from benchmarks.harness.timing import alternated, cpu_clock, interleaved, rotated, setup
from benchmarks.harness.train import train_run

from .arms import BLOCK, NEVER, OFF, ROUNDS, WARMUP, SelectArm, Stepper, ablation_arms, suite_arms
from .report import SUITES as REPORTED  # 'all' runs what report.py reads; noisy30-100k by 'run' only
from .report import report

RESULTS = results_dir("auto")
SUITES = RECIPE_SUITES  # name: (samples, family, label noise, epochs)
TUNED = {  # the pruning benchmark's tuned recipes (benchmarks/results/pruning/*/tuned.json; noisy reuses the ConvNet's)
    "cnn": {"batch": 64, "lr": 6e-3},
    "mlp": {"batch": 64, "lr": 8e-3},
}
SEEDS = (0, 1, 2)
LM_ARMS = ("baseline", "topk-0.5-shrink", "random-0.5-shrink", "importance-0.5-shrink",
           "importance-gradnorm-0.5-shrink", "auto")  # fmt: skip
LM_TUNING = results_dir("lm") / "main" / "tune.jsonl"  # the LM benchmark's recorded grid
EVALS = 32  # test evaluations per run: issue 28 reads time to accuracy from at least 32
SMOKE = {"samples": 2000, "epochs": 2, "seeds": (0,)}


def plan(name: str, smoke: bool) -> tuple[int, str, float, int, tuple[int, ...], list[SelectArm]]:
    samples, family, noise, epochs = SUITES[name]
    seeds = SEEDS
    if smoke:
        samples, epochs, seeds = SMOKE["samples"], SMOKE["epochs"], SMOKE["seeds"]
    user = {"batch": RECIPES[family]["batch"], "lr": RECIPES[family]["lr"]}
    return samples, family, noise, epochs, seeds, suite_arms(user, TUNED[family])


def run_auto_suite(
    name: str,
    out: Path,
    worker: tuple[int, int],
    smoke: bool,
    info: dict,
    only: list[str] | None = None,
    evals: int = EVALS,
) -> None:
    """Every (seed, arm) of suite ``name`` not yet in ``out/<name>/runs.jsonl``, interleaved and rotating (``only``:
    these arms alone), each evaluated ``evals`` times (time to accuracy reads the curve between them)."""
    samples, family, noise, epochs, seeds, arms = plan(name, smoke)
    if only:
        arms += ablation_arms({"batch": RECIPES[family]["batch"], "lr": RECIPES[family]["lr"]})
        unknown = sorted(set(only) - {arm.name for arm in arms})
        if unknown:
            raise SystemExit(f"--arms: unknown arm(s) {unknown}; the suite's arms are {[arm.name for arm in arms]}")
        arms = [arm for arm in arms if arm.name in only]
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    data = dataset(samples, noise=noise)

    def job(arm: SelectArm, seed: int) -> Job:
        def run() -> dict:
            record = train_run(data, arm, family=family, epochs=epochs, seed=seed, evals=evals, clock=cpu_clock)
            record.update(suite=name, samples=samples, noise=noise, time=time.time())
            return record

        return Job((arm.name, seed), run)

    def jobs() -> Iterator[Job]:
        for seed in seeds:
            for arm in rotated(arms, seed):
                yield job(arm, seed)

    def line(r: dict) -> None:
        print(f"{name} seed={r['seed']} {r['arm']:<26} acc={r['accuracy']:.4f} s={r['seconds']:.1f}", flush=True)

    run_loop(jobs(), folder / "runs.jsonl", lambda r: (r["arm"], r["seed"]), worker=worker, log=line)
    (folder / "machine.json").write_text(json.dumps({**machine(), "suite": name, **info}, indent=2))


def lm_plan(smoke: bool) -> lm_suite.Plan:
    """The LM suite's arms of this benchmark: every regime, 3 seeds, at the tuned baseline's FE (the smoke run's
    sizes with ``smoke``)."""
    if smoke:
        return replace(lm_suite.SMOKE, arm_names=LM_ARMS)
    return replace(lm_suite.Plan(), arm_names=LM_ARMS, fractions=(1.0,))


def run_lm(
    out: Path, jobs: int, smoke: bool, worker: tuple[int, int] | None = None, only: list[str] | None = None
) -> None:
    """The language-model suite's arms (``harness/lm_suite.py``, shared with the LM benchmark), both regimes, 3
    seeds, at the tuned baseline's FE; the LM benchmark's recorded tuning grid is reused (the smoke run tunes anew).
    With ``worker``, this process runs its share; else ``jobs`` worker processes of this benchmark run it. ``only``:
    these arms alone."""
    folder = out / "lm"
    folder.mkdir(parents=True, exist_ok=True)
    plan = lm_plan(smoke)
    if only:
        unknown = sorted(set(only) - set(plan.arm_names))
        if unknown:
            raise SystemExit(f"--arms: unknown LM arm(s) {unknown}; the LM arms are {list(plan.arm_names)}")
        plan = replace(plan, arm_names=tuple(name for name in plan.arm_names if name in only))
    if not smoke and not (folder / "tune.jsonl").exists():
        (folder / "tune.jsonl").write_text(LM_TUNING.read_text())
    if worker is not None or smoke:
        if smoke:  # the grid (its rounds), then the runs, in this process
            for round_ in range(plan.widen + 1):
                lm_suite.stage("tune", plan, folder, (0, 1), round_)
        lm_suite.stage("run", plan, folder, worker or (0, 1))
        return
    common = ["--out", str(out), *(["--arms", ",".join(only)] if only else [])]
    procs = [
        subprocess.Popen([sys.executable, "-m", "benchmarks", "auto", "lm", "--worker", f"{i}/{jobs}", *common])
        for i in range(jobs)
    ]
    if any(proc.wait() for proc in procs):
        raise SystemExit("benchmarks auto lm: a worker failed")


def spawn(stages: list[list[str]], jobs: int, common: list[str]) -> None:
    """Run each stage in ``jobs`` worker processes of this benchmark side by side; raise if one fails."""
    for stage in stages:
        procs = [
            subprocess.Popen([sys.executable, "-m", "benchmarks", "auto", *stage, "--worker", f"{i}/{jobs}", *common])
            for i in range(jobs)
        ]
        codes = [proc.wait() for proc in procs]
        if any(codes):
            raise SystemExit(f"benchmarks auto {' '.join(stage)}: a worker failed (exit codes {codes})")


def main(argv: list[str] | None = None) -> int:
    """Run a stage of the auto benchmark (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks auto", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("stage", choices=["all", "run", "timing", "lm", "report"])
    parser.add_argument("suite", nargs="?", choices=sorted(SUITES), help="the suite ('run' only)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default benchmarks/results/auto)")
    parser.add_argument("--smoke", action="store_true", help="seconds-long: 2,000 samples, 2 epochs, one seed")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for 'all' (default 2)")
    parser.add_argument("--arms", help="'run' and 'lm': comma-separated arm names to run (default: every arm)")
    parser.add_argument("--worker", help="I/N: run every N-th run from the I-th (default 0/1; 'lm': its N workers)")
    parser.add_argument("--evals", type=int, default=EVALS,
                        help=f"'run': test evaluations per run (default {EVALS}; the records before 2026-12-03's "
                             "evals32 took 8)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.evals < 1:
        parser.error(f"--evals must be an int >= 1, got {args.evals}")
    worker = None if args.worker is None else tuple(int(v) for v in args.worker.split("/"))
    common = ["--out", str(args.out), "--evals", str(args.evals), *(["--smoke"] if args.smoke else [])]
    if args.stage == "all":
        started = time.time()
        spawn([["run", name] for name in REPORTED], args.jobs, common)
        main(["timing", *common])
        run_lm(args.out, args.jobs, args.smoke)
        report(args.out, wall_seconds=time.time() - started)
        return 0
    if args.stage == "report":
        report(args.out)
        return 0
    if args.stage == "lm":
        only = args.arms.split(",") if args.arms else None
        run_lm(args.out, args.jobs, args.smoke, worker, only)  # type: ignore[arg-type]
        return 0
    info = setup()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "timing":
        timing(args.out, smoke=args.smoke, info=info)
        return 0
    if args.suite is None:
        parser.error("run needs a suite: one of " + ", ".join(sorted(SUITES)))
    only = args.arms.split(",") if args.arms else None
    run_auto_suite(args.suite, args.out, worker or (0, 1), args.smoke, info, only, args.evals)  # type: ignore[arg-type]
    return 0


# Cheap when off: the per-step cost of ``keep="auto"`` between trials against a plain loop.
#
# Both arms train the ConvNet at batch 256 on MNIST-1D batches held in memory. The auto arm never starts a trial
# (``warmup=NEVER``), so it measures what every batch between two trials costs: the controller's counter check and
# sbdata's per-batch work. Steps run in blocks of ``BLOCK``, the arms alternating, ``ROUNDS`` rounds after a warm-up;
# the ratio is of the medians of thread CPU time per step. What trials cost is in the suites' measured seconds.


def timing(out: Path, *, smoke: bool = False, info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Interleaved per-step seconds of a plain loop and of auto while off; writes ``<out>/timing/summary.json``
    (``raw.json``: every block's seconds; ``machine.json``: the machine and the timing set-up ``info``)."""
    data = dataset(4096 if smoke else 20_000)
    x, y = data.x_train, data.y_train
    batches = [(x[i : i + 256], y[i : i + 256]) for i in range(0, len(x) - 255, 256)]
    auto = Auto().sized()  # a stream's sizes: those the stepper gets (its batches are a list of unknown epoch)
    weighted = {"policy": "importance", "score": "gradnorm", "return_weights": True}
    arms = {
        "plain loop": Stepper(batches, None),
        "auto (off)": Stepper(batches, Auto(costs=OFF, warmup=NEVER)),
        "auto importance-gradnorm (off)": Stepper(batches, Auto(costs=OFF, warmup=NEVER), **weighted),
    }
    rounds, warmup = (1, 1) if smoke else (ROUNDS, WARMUP)  # smoke: one measured round, every arm's code run

    def block(stepper: Stepper) -> Callable[[int], float]:
        def run(_: int) -> float:
            started = cpu_clock()
            for _ in range(BLOCK):
                stepper.step()
            return (cpu_clock() - started) / BLOCK

        return run

    blocks = {name: block(stepper) for name, stepper in arms.items()}
    seconds: dict[str, list[float]] = interleaved(blocks, rounds, warmup=warmup, order=alternated)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    stats = arms["auto (off)"].source.stats
    plain = seconds["plain loop"]
    result = {
        "per_step_ms": {name: 1e3 * value for name, value in medians.items()},
        "ratio": medians["auto (off)"] / medians["plain loop"],
        "ratio_per_round": [a / p for a, p in zip(seconds["auto (off)"], plain, strict=True)],
        "ratio_weighted": medians["auto importance-gradnorm (off)"] / medians["plain loop"],
        "ratio_weighted_per_round": [
            a / p for a, p in zip(seconds["auto importance-gradnorm (off)"], plain, strict=True)
        ],
        "auto_on_share": stats.auto_on_share,
        "trial_batches": auto.trial_batches,
        "every": auto.every,
        "samples_scored": stats.samples_scored,
        "block": BLOCK,
        "rounds": rounds,
    }
    table = (
        "| arm | ms per step (median) |\n| --- | --- |\n"
        + "".join(f"| {name} | {1e3 * value:.3f} |\n" for name, value in medians.items())
        + f"\nauto (off) / plain loop: {result['ratio']:.3f}; importance-gradnorm, weighted: "
        + f"{result['ratio_weighted']:.3f} (target <= 1.02; on-share {stats.auto_on_share:.2f})\n"
    )
    write_results(out / "timing", result, table)
    (out / "timing" / "raw.json").write_text(json.dumps(seconds))
    (out / "timing" / "machine.json").write_text(json.dumps({**machine(), **(info or {})}, indent=1))
    return result


if __name__ == "__main__":
    raise SystemExit(main())
