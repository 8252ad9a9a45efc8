"""Running a suite: every (seed, budget level, arm) in turn, interleaved, each record appended as it ends.

Shared by ``time_to_accuracy.py`` and ``pruning.py`` (no benchmark script imports another).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from . import _suites
from ._harness import append_jsonl, dataset, machine, read_jsonl, train_run

__all__ = ["run_suite"]


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
