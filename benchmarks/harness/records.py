"""Records of the benchmarks: ``runs.jsonl`` (one run per line, appended as it ends), ``machine.json`` (what the
numbers were measured on), ``summary.json`` and ``table.md`` (what a report derives), written and read here.

Every benchmark writes to ``benchmarks/results/<benchmark>/<suite>/`` (:func:`results_dir`).
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parents[1] / "results"


def results_dir(benchmark: str) -> Path:
    """``benchmarks/results/<benchmark>``: a benchmark's default ``--out``; its suites are folders inside."""
    return RESULTS / benchmark


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one run's record (a crash loses at most the run in progress)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def write_results(out: Path, results: dict[str, Any], table: str) -> None:
    """Write a suite's ``<out>/summary.json`` and ``<out>/table.md``, and print the table."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    (out / "table.md").write_text(table)
    print(table)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a ``runs.jsonl`` (or any JSON-lines file), none when it does not exist."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
