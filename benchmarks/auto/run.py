"""Does selection pay? ``keep="auto"``, importance sampling and the fixed arms against the user's and the tuned recipe.

Exact commands (from the repository root; the recorded run's time is in benchmarks/README.md):

    python -m benchmarks.auto all --jobs 2            # every suite, 3 seeds, the timing check, the report
    python -m benchmarks.auto run cnn100k [--worker I/N]   # one suite (cnn100k, mlp100k, noisy100k)
    python -m benchmarks.auto timing                  # cheap when off: auto (off, probes included) vs a plain loop
    python -m benchmarks.auto lm [--jobs 2]           # the LM suite's arms (benchmarks.lm, tuned recipe reused)
    python -m benchmarks.auto report                  # tables, targets, decisions plot -> benchmarks/results/auto
    python -m benchmarks.auto all --smoke --jobs 1 --out /tmp/auto   # seconds; what CI runs

Suites (MNIST-1D, generated offline): ``cnn100k`` (the ConvNet, 100,000 samples, 8 epochs), ``mlp100k`` (the MLP,
16 epochs), ``noisy100k`` (the ConvNet with 20% of the training labels flipped). Arms (``_auto_arms.py``): the
user's recipe (batch 256), the tuned baseline (the pruning benchmark's tuned batch and LR), top-k and random at
keep 0.25, importance sampling by loss and by gradient norm at keep 0.25 (weighted, unbiased), and ``keep="auto"``
twice: on importance sampling by gradient norm (weighted; the estimate's own model) and as it comes (``auto-topk``:
top-k on the loss, every option at its default). Every arm trains the suite's epochs; runs are
interleaved (per seed, every arm in turn, rotating), appended to ``<out>/<suite>/runs.jsonl`` as they end (a rerun
continues), and timed in this thread's CPU seconds (two benchmark processes share the two cores; wall seconds of a
run moved by 15-40% with what ran beside it), with torch on one thread and the allocator pinned (``_timing.py``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from ._auto_arms import SelectArm, suite_arms
from ._harness import RECIPES, append_jsonl, dataset, machine, read_jsonl, train_run
from ._timing import cpu_clock, setup

RESULTS = Path(__file__).resolve().parent / "results" / "auto"
SUITES = {  # name: (samples, family, label noise, epochs)
    "cnn100k": (100_000, "cnn", 0.0, 8),
    "mlp100k": (100_000, "mlp", 0.0, 16),
    "noisy100k": (100_000, "cnn", 0.2, 8),
}
TUNED = {  # the pruning benchmark's tuned recipes (benchmarks/results/prune-*/tuned.json; noisy reuses the ConvNet's)
    "cnn": {"batch": 64, "lr": 6e-3},
    "mlp": {"batch": 64, "lr": 8e-3},
}
SEEDS = (0, 1, 2)
LM_ARMS = ("baseline", "topk-0.5-shrink", "random-0.5-shrink", "importance-0.5-shrink",
           "importance-gradnorm-0.5-shrink", "auto")  # fmt: skip
LM_TUNING = Path(__file__).resolve().parent / "results" / "lm" / "tune.jsonl"  # the LM benchmark's recorded grid
SMOKE = {"samples": 2000, "epochs": 2, "seeds": (0,)}


def plan(name: str, smoke: bool) -> tuple[int, str, float, int, tuple[int, ...], list[SelectArm]]:
    samples, family, noise, epochs = SUITES[name]
    seeds = SEEDS
    if smoke:
        samples, epochs, seeds = SMOKE["samples"], SMOKE["epochs"], SMOKE["seeds"]
    user = {"batch": RECIPES[family]["batch"], "lr": RECIPES[family]["lr"]}
    return samples, family, noise, epochs, seeds, suite_arms(user, TUNED[family])


def run_auto_suite(name: str, out: Path, worker: tuple[int, int], smoke: bool) -> None:
    """Every (seed, arm) of suite ``name`` not yet in ``out/<name>/runs.jsonl``, interleaved and rotating."""
    samples, family, noise, epochs, seeds, arms = plan(name, smoke)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "runs.jsonl"
    done = {(r["arm"], r["seed"]) for r in read_jsonl(path)}
    data = dataset(samples, noise=noise)
    index = -1
    for seed in seeds:
        turn = seed % len(arms)
        for arm in arms[turn:] + arms[:turn]:
            index += 1
            if index % worker[1] != worker[0] or (arm.name, seed) in done:
                continue
            record = train_run(data, arm, family=family, epochs=epochs, seed=seed, evals=8, clock=cpu_clock)
            record.update(suite=name, samples=samples, noise=noise, time=time.time())
            append_jsonl(path, record)
            print(
                f"{name} seed={seed} {arm.name:<26} acc={record['accuracy']:.4f} s={record['seconds']:.1f}", flush=True
            )
    (folder / "machine.json").write_text(json.dumps({**machine(), "suite": name}, indent=2))


def run_lm(out: Path, jobs: int, smoke: bool) -> None:
    """The language-model suite's arms through ``benchmarks.lm`` (its own process: no script imports another), both
    regimes, 3 seeds, at the tuned baseline's FE; the recorded tuning grid is reused (the smoke run tunes anew)."""
    folder = out / "lm"
    folder.mkdir(parents=True, exist_ok=True)
    if not smoke and not (folder / "tune.jsonl").exists():
        (folder / "tune.jsonl").write_text(LM_TUNING.read_text())
    stages = ["all"] if smoke else ["run", "--fractions", "1.0"]
    command = [sys.executable, "-m", "benchmarks.lm", *stages, "--out", str(folder), "--arms", *LM_ARMS]
    if smoke:
        command += ["--smoke", "--jobs", "1"]
        subprocess.run(command, check=True)
        return
    procs = [subprocess.Popen([*command, "--worker", f"{i}/{jobs}"]) for i in range(jobs)]
    if any(proc.wait() for proc in procs):
        raise SystemExit("benchmarks.lm run: a worker failed")


def spawn(stages: list[list[str]], jobs: int, common: list[str]) -> None:
    """Run each stage in ``jobs`` worker processes side by side; raise if one fails."""
    for stage in stages:
        procs = [
            subprocess.Popen([sys.executable, "-m", "benchmarks.auto", *stage, "--worker", f"{i}/{jobs}", *common])
            for i in range(jobs)
        ]
        codes = [proc.wait() for proc in procs]
        if any(codes):
            raise SystemExit(f"benchmarks.auto {' '.join(stage)}: a worker failed (exit codes {codes})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["all", "run", "timing", "lm", "report"])
    parser.add_argument("suite", nargs="?", choices=sorted(SUITES), help="the suite ('run' only)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default benchmarks/results/auto)")
    parser.add_argument("--smoke", action="store_true", help="seconds-long: 2,000 samples, 2 epochs, one seed")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for 'all' (default 2)")
    parser.add_argument("--worker", default="0/1", help="I/N: run every N-th run from the I-th")
    args = parser.parse_args(argv)
    common = ["--out", str(args.out), *(["--smoke"] if args.smoke else [])]
    if args.stage == "all":
        started = time.time()
        spawn([["run", name] for name in SUITES], args.jobs, common)
        main(["timing", *common])
        run_lm(args.out, args.jobs, args.smoke)
        from ._auto_report import report

        report(args.out, wall_seconds=time.time() - started)
        return 0
    if args.stage == "report":
        from ._auto_report import report

        report(args.out)
        return 0
    if args.stage == "lm":
        run_lm(args.out, args.jobs, args.smoke)
        return 0
    info = setup()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "timing_setup.json").write_text(json.dumps(info, indent=1))
    if args.stage == "timing":
        from ._auto_timing import timing

        timing(args.out, smoke=args.smoke)
        return 0
    if args.suite is None:
        parser.error("run needs a suite: one of " + ", ".join(sorted(SUITES)))
    run_auto_suite(args.suite, args.out, tuple(int(v) for v in args.worker.split("/")), args.smoke)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
