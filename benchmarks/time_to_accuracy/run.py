"""Time-to-accuracy: sbdata's selection against the baseline, its controls and Composer's rule, on MNIST-1D.

Stages: ``sweep``, a suite (``clean100k``, ``clean20k``, ``noisy100k``, ``mlp100k``, ``cache100k``; ``--worker I/N``),
``report``. Runs go through the harness's run loop (interleaved, resumable). Commands and records:
``benchmarks/time_to_accuracy/README.md``.
"""

from __future__ import annotations

import torch

from benchmarks.harness import suites as _suites
from benchmarks.harness.records import results_dir
from benchmarks.harness.runs import cli, run_suite

from . import report

RESULTS = results_dir("time_to_accuracy")


def main(argv: list[str] | None = None) -> int:
    """Run the time_to_accuracy benchmark (see the module docstring); returns the exit status."""
    parser = cli("time_to_accuracy", __doc__, out=RESULTS, smoke="2,000 samples, one seed, tiny budgets", workers=True)
    parser.add_argument(
        "suite", choices=["sweep", "clean100k", "clean20k", "noisy100k", "mlp100k", "cache100k", "report"]
    )
    parser.add_argument("--seeds", type=int, nargs="*", help="override the suite's seeds")
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
    worker = args.worker
    records = run_suite(suite, args.out / suite.name, worker=worker)
    if suite.name == "sweep":
        report.write_sweep(records, args.out / suite.name)
    else:
        report.write_suite(records, args.out / suite.name)
    return 0
