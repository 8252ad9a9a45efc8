"""Time-to-accuracy: sbdata's selection against the baseline, its controls and Composer's rule, on MNIST-1D.

Exact commands (from the repository root, sbdata importable; about 2.5 hours on 2 shared CPU cores in all):

    python -m benchmarks time_to_accuracy sweep        # keep x schedule x policy x layout, 1 seed -> best.json
    python -m benchmarks time_to_accuracy clean100k    # the headline: 100,000 samples, ConvNet, 3 seeds
    python -m benchmarks time_to_accuracy clean20k     # 20,000 samples
    python -m benchmarks time_to_accuracy noisy100k    # 20% of training labels flipped, with ReducibleSelect
    python -m benchmarks time_to_accuracy mlp100k      # a second model family: the MLP
    python -m benchmarks time_to_accuracy cache100k    # the stale-loss cache: staleness 1, 2, 4, +/- observe
    python -m benchmarks time_to_accuracy report       # tables (Markdown, JSON) and plots from what was run
    python -m benchmarks time_to_accuracy clean100k --smoke --out /tmp/tta   # seconds; what CI runs

Each run (arm, budget in epochs, seed) is one annealed training run; its record is appended to
``<out>/<suite>/runs.jsonl`` (``<out>``: ``benchmarks/results/time_to_accuracy`` by default) as soon as it ends, and
a rerun skips the runs already there (so a crash loses at most one run). Arms, seeds and budgets are interleaved:
for each seed, for each budget level, every arm in turn, so that drift in the machine's load touches all arms alike.
Torch runs on one thread. The published run used two processes per suite (``--worker 0/2`` and ``--worker 1/2`` side
by side, then ``report``), so every arm was timed with the same two benchmark processes on the machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from benchmarks.harness import suites as _suites
from benchmarks.harness.records import results_dir
from benchmarks.harness.runs import run_suite

from . import report

RESULTS = results_dir("time_to_accuracy")


def main(argv: list[str] | None = None) -> int:
    """Run the time_to_accuracy benchmark (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks time_to_accuracy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "suite", choices=["sweep", "clean100k", "clean20k", "noisy100k", "mlp100k", "cache100k", "report"]
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="results folder (default benchmarks/results/time_to_accuracy)"
    )
    parser.add_argument("--seeds", type=int, nargs="*", help="override the suite's seeds")
    parser.add_argument("--smoke", action="store_true", help="seconds-long: 2,000 samples, one seed, tiny budgets")
    parser.add_argument("--worker", default="0/1", help="I/N: run every N-th run from the I-th (parallel processes)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.suite == "report":
        report.report_all(args.out)
        return 0
    suite = _suites.suites(args.out / "sweep" / "best.json")[args.suite]
    if args.smoke:
        suite = _suites.smoke(suite)
    if args.seeds:
        suite.seeds = tuple(args.seeds)
    worker = tuple(int(v) for v in args.worker.split("/"))
    records = run_suite(suite, args.out / suite.name, worker=worker)
    if suite.name == "sweep":
        report.write_sweep(records, args.out / suite.name)
    else:
        report.write_suite(records, args.out / suite.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
