"""The one run loop: jobs in their interleaved order, each record appended to ``runs.jsonl`` as it ends, resumable,
split among workers; and the worker spawner.

Every recipe that trains runs lists its jobs in the order it interleaves them (per seed, per budget level, every arm
in turn, rotating) and hands them to :func:`run_loop`, which skips the jobs already recorded (a rerun continues where
a crash stopped) and the jobs of other workers (``worker=(i, n)``: every n-th job of that order, from the i-th).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .records import append_jsonl, read_jsonl

Record = dict[str, Any]


@dataclass
class Job:
    """One run: its identity (as ``run_loop``'s ``key`` reads it back from a recorded line) and what trains it."""

    key: Hashable
    run: Callable[[], Record]


def run_loop(jobs: Iterable[Job], path: Path, key: Callable[[Record], Hashable], *, worker: tuple[int, int] = (0, 1),
             log: Callable[[Record], None] | None = None) -> list[Record]:  # fmt: skip
    """Run every job of this worker not yet in ``path``, in order (``log`` called with each new record); return all
    the records there."""
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
    if not 0 <= index < count:
        raise ValueError(f"--worker I/N needs 0 <= I < N, got {text!r}")
    return index, count


def spawn(argv: list[str], jobs: int) -> None:
    """``python -m benchmarks ARGV --worker i/jobs`` in ``jobs`` processes side by side; waits for all, raises if
    one fails."""
    command = [sys.executable, "-m", "benchmarks", *argv]
    procs = [subprocess.Popen([*command, "--worker", f"{i}/{jobs}"]) for i in range(jobs)]
    codes = [proc.wait() for proc in procs]
    if any(codes):
        raise SystemExit(f"benchmarks {' '.join(argv)}: a worker failed (exit codes {codes})")
