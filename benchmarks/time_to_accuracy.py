"""Time-to-accuracy: sbdata's selection against the baseline, its controls and Composer's rule, on MNIST-1D.

Exact commands (from the repository root, sbdata importable; about 2.5 hours on 2 shared CPU cores in all):

    python -m benchmarks.time_to_accuracy sweep        # keep x schedule x policy x layout, 1 seed -> best.json
    python -m benchmarks.time_to_accuracy clean100k    # the headline: 100,000 samples, ConvNet, 3 seeds
    python -m benchmarks.time_to_accuracy clean20k     # 20,000 samples
    python -m benchmarks.time_to_accuracy noisy100k    # 20% of training labels flipped, with ReducibleLoss
    python -m benchmarks.time_to_accuracy mlp100k      # a second model family: the MLP
    python -m benchmarks.time_to_accuracy cache100k    # the stale-loss cache: staleness 1, 2, 4, +/- observe
    python -m benchmarks.time_to_accuracy report       # tables (Markdown, JSON) and plots from what was run
    python -m benchmarks.time_to_accuracy clean100k --smoke --out /tmp/tta   # seconds; what CI runs

Each run (arm, budget in epochs, seed) is one annealed training run; its record is appended to
``<out>/<suite>/runs.jsonl`` as soon as it ends, and a rerun skips the runs already there (so a crash loses at
most one run). Arms, seeds and budgets are interleaved: for each seed, for each budget level, every arm in turn,
so that drift in the machine's load touches all arms alike. Torch runs on one thread. The published run used two
processes per suite (``--worker 0/2`` and ``--worker 1/2`` side by side, then ``report``), so every arm was timed
with the same two benchmark processes on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from benchmarks import _output, _suites
from benchmarks._harness import append_jsonl, dataset, machine, read_jsonl, train_run

RESULTS = Path(__file__).resolve().parent / "results"


def run_suite(suite: _suites.Suite, out: Path, worker: tuple[int, int] = (0, 1), log=print) -> list[dict]:
    """Run every (seed, budget level, arm) of ``suite`` not yet in ``out/runs.jsonl``; return all records.

    With ``worker=(i, n)`` only every n-th run of that order, from the i-th, is done (n processes share a suite).
    """
    path = out / "runs.jsonl"
    done = {(r["arm"], r["epochs"], r["seed"]) for r in read_jsonl(path)}
    data = dataset(suite.samples, noise=suite.noise)
    budgets = {arm.name: suite.epochs_for(arm) for arm in suite.arms}
    levels = max(len(b) for b in budgets.values())
    index = -1
    for seed in suite.seeds:
        for level in range(levels):
            order = suite.arms[level % len(suite.arms) :] + suite.arms[: level % len(suite.arms)]
            for arm in order:
                if level >= len(budgets[arm.name]):
                    continue
                epochs = budgets[arm.name][level]
                index += 1
                if index % worker[1] != worker[0] or (arm.name, epochs, seed) in done:
                    continue
                evals = 8 if epochs == budgets[arm.name][-1] else 1  # the test curve only where it is read
                record = train_run(data, arm, family=suite.family, epochs=epochs, seed=seed, evals=evals)
                record.update(suite=suite.name, samples=suite.samples, noise=suite.noise, time=time.time())
                append_jsonl(path, record)
                log(
                    f"{suite.name} seed={seed} {arm.name:<36} e={epochs:<3} acc={record['accuracy']:.4f} "
                    f"fe={record['fe'] / 1e6:.2f}M s={record['seconds']:.1f}"
                )
    (out / "machine.json").write_text(json.dumps({**machine(), "suite": suite.name}, indent=2))
    return read_jsonl(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "suite", choices=["sweep", "clean100k", "clean20k", "noisy100k", "mlp100k", "cache100k", "report"]
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default benchmarks/results)")
    parser.add_argument("--seeds", type=int, nargs="*", help="override the suite's seeds")
    parser.add_argument("--smoke", action="store_true", help="seconds-long: 2,000 samples, one seed, tiny budgets")
    parser.add_argument("--worker", default="0/1", help="I/N: run every N-th run from the I-th (parallel processes)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.suite == "report":
        _output.report_all(args.out)
        return 0
    suite = _suites.suites(args.out / "sweep" / "best.json")[args.suite]
    if args.smoke:
        suite = _suites.smoke(suite)
    if args.seeds:
        suite.seeds = tuple(args.seeds)
    worker = tuple(int(v) for v in args.worker.split("/"))
    records = run_suite(suite, args.out / suite.name, worker=worker)
    if suite.name == "sweep":
        _output.write_sweep(records, args.out / suite.name)
    else:
        _output.write_suite(records, args.out / suite.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
