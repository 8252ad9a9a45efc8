"""The one run loop: jobs in their interleaved order, each record appended to ``runs.jsonl`` as it ends.

Every benchmark that trains runs (time-to-accuracy, pruning, auto, the language-model benchmark's tuning grid and
suite) lists its jobs in the order it interleaves them (per seed, per budget level, every arm in turn, rotating) and
hands them to :func:`run_loop`, which skips the jobs already recorded (a rerun continues where a crash stopped) and
the jobs of other workers (``worker=(i, n)``: every n-th job of that order, from the i-th).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .records import append_jsonl, machine, read_jsonl
from .suites import Suite
from .timing import rotated

__all__ = ["Job", "cli", "run_loop", "run_suite", "spawn", "worker"]

Record = dict[str, Any]


@dataclass
class Job:
    """One run of a benchmark.

    Attributes:
        key: the run's identity, as ``run_loop``'s ``key`` reads it back from a recorded line.
        run: trains the run and returns its JSON record.
    """

    key: Hashable
    run: Callable[[], Record]


def run_loop(
    jobs: Iterable[Job],
    path: Path,
    key: Callable[[Record], Hashable],
    *,
    worker: tuple[int, int] = (0, 1),
    log: Callable[[Record], None] | None = None,
) -> list[Record]:
    """Run every job of this worker not yet in ``path`` (a ``runs.jsonl``), in order; return all records there.

    Args:
        jobs: the runs in their interleaved order (every worker lists the same order).
        path: the JSON-lines file each record is appended to as its run ends.
        key: a recorded line's identity, compared with each job's ``key``.
        worker: ``(i, n)``: this process runs every n-th job, from the i-th.
        log: called with each new record (a progress line).
    """
    done = {key(r) for r in read_jsonl(path)}
    for index, job in enumerate(jobs):
        if index % worker[1] != worker[0] or job.key in done:
            continue
        record = job.run()
        append_jsonl(path, record)
        if log is not None:
            log(record)
    return read_jsonl(path)


def worker(text: str) -> tuple[int, int]:
    """``--worker I/N`` as ``(I, N)``: this process runs every N-th job of the run loop's order, from the I-th."""
    index, count = (int(v) for v in text.split("/"))
    return index, count


def cli(name: str, doc: str | None, *, out: Path | None = None, smoke: str = "", workers: bool = False,
           suite: bool = False) -> argparse.ArgumentParser:  # fmt: skip
    """A benchmark's command line (``python -m benchmarks <name>``, its module docstring as the help) with the
    options benchmarks share: ``--out`` (default ``out``), ``--suite`` (its folder inside ``--out``), ``--smoke`` (its
    help ``smoke``) and ``--worker I/N`` (:func:`worker`)."""
    found = argparse.ArgumentParser(
        prog=f"python -m benchmarks {name}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if out is not None:
        found.add_argument("--out", type=Path, default=out, help=f"results folder (default {out})")
    if suite:
        found.add_argument("--suite", default="main", help="the suite's folder inside --out (default main)")
    if smoke:
        found.add_argument("--smoke", action="store_true", help=f"seconds-long: {smoke}")
    if workers:
        found.add_argument("--worker", type=worker, default=(0, 1), help="I/N: run every N-th run from the I-th")
    return found


def spawn(benchmark: str, stage: list[str], jobs: int, common: list[str]) -> None:
    """The one worker spawner: ``python -m benchmarks <benchmark> <stage> --worker i/jobs <common>`` in ``jobs``
    processes side by side (each runs its share of :func:`run_loop`'s order); waits for all, raises if one fails."""
    command = [sys.executable, "-m", "benchmarks", benchmark, *stage]
    procs = [subprocess.Popen([*command, "--worker", f"{i}/{jobs}", *common]) for i in range(jobs)]
    codes = [proc.wait() for proc in procs]
    if any(codes):
        raise SystemExit(f"benchmarks {benchmark} {' '.join(stage)}: a worker failed (exit codes {codes})")


def run_suite(suite: Suite, out: Path, worker: tuple[int, int] = (0, 1), log=print) -> list[Record]:
    """Run every (seed, budget level, arm) of ``suite`` not yet in ``out/runs.jsonl``; return all records.

    Shared by the time-to-accuracy and the pruning benchmarks. With ``worker=(i, n)`` only every n-th run of that
    order, from the i-th, is done (n processes share a suite).
    """
    from .data import dataset
    from .train import train_run

    data = dataset(suite.samples, noise=suite.noise)
    budgets = {arm.name: suite.epochs_for(arm) for arm in suite.arms}
    levels = max(len(b) for b in budgets.values())

    def job(arm: Any, epochs: int, seed: int) -> Job:
        def run() -> Record:
            evals = 8 if epochs == budgets[arm.name][-1] else 1  # the test curve only where it is read
            record = train_run(data, arm, family=suite.family, epochs=epochs, seed=seed, evals=evals)
            record.update(suite=suite.name, samples=suite.samples, noise=suite.noise, time=time.time())
            return record

        return Job((arm.name, epochs, seed), run)

    def jobs() -> Iterable[Job]:
        for seed in suite.seeds:
            for level in range(levels):
                for arm in rotated(suite.arms, level):
                    if level < len(budgets[arm.name]):
                        yield job(arm, budgets[arm.name][level], seed)

    def line(record: Record) -> None:
        log(
            f"{suite.name} seed={record['seed']} {record['arm']:<36} e={record['epochs']:<3} "
            f"acc={record['accuracy']:.4f} fe={record['fe'] / 1e6:.2f}M s={record['seconds']:.1f}"
        )

    records = run_loop(
        jobs(), out / "runs.jsonl", lambda r: (r["arm"], r["epochs"], r["seed"]), worker=worker, log=line
    )
    (out / "machine.json").write_text(json.dumps({**machine(), "suite": suite.name}, indent=2))
    return records
