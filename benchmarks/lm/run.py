"""Selection for language-model training: a byte-level causal transformer on the Python standard library's source.

Stages: ``all`` (``--jobs N`` workers), ``tune``, ``run`` (``--worker I/N``), ``report``. The suite (shared with the
auto benchmark) is ``harness/lm_suite.py``; commands and records: ``benchmarks/lm/README.md``.
"""

from __future__ import annotations

import time
from dataclasses import replace

from benchmarks.harness.lm_suite import SMOKE, SMOKE_ARMS, Plan, stage
from benchmarks.harness.records import results_dir
from benchmarks.harness.runs import cli, spawn

RESULTS = results_dir("lm")


def main(argv: list[str] | None = None) -> int:
    """Run a stage of the language-model benchmark (see the module docstring); returns the exit status."""
    parser = cli("lm", __doc__, out=RESULTS, smoke="tiny budgets, one seed, a few arms", workers=True, suite=True)
    parser.add_argument("stage", choices=["all", "tune", "run", "report"])
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for 'all' (default 2)")
    parser.add_argument("--round", type=int, default=0, help="tuning round (0: the grid; k: k-th widening)")
    parser.add_argument("--arms", nargs="*", help="run only these arms (default: every arm; the smoke run's few)")
    parser.add_argument("--fractions", type=float, nargs="*", help="budgets as fractions of the tuned FE")
    args = parser.parse_args(argv)
    out = args.out / args.suite
    plan = replace(SMOKE, arm_names=SMOKE_ARMS) if args.smoke else Plan()
    if args.arms:
        plan = replace(plan, arm_names=tuple(args.arms))
    if args.fractions:
        plan = replace(plan, fractions=tuple(args.fractions))
    common = ["--out", str(args.out), "--suite", args.suite, *(["--smoke"] if args.smoke else [])]
    common += [*(["--arms", *args.arms] if args.arms else []), *(["--fractions"] if args.fractions else [])]
    common += [str(f) for f in args.fractions or []]
    if args.stage == "all":
        started = time.time()
        for round_ in range(plan.widen + 1):
            spawn("lm", ["tune", "--round", str(round_)], args.jobs, common)
        spawn("lm", ["run"], args.jobs, common)
        from .report import report

        report(out, wall_seconds=time.time() - started)
        return 0
    if args.stage == "report":
        from .report import report

        report(out)
        return 0
    stage(args.stage, plan, out, args.worker, args.round)  # type: ignore[arg-type]
    return 0
