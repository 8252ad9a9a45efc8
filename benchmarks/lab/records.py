"""The one record writer and reader, and the one table writer.

A record is a folder under ``benchmarks/results/<recipe>/<name>/``: ``runs.jsonl`` (one run per line, appended as it
ends), ``machine.json`` (what the numbers were measured on, and the data), ``timing.json`` where a recipe times
steps, and what a report derives (``summary.json``, ``table.md``, plots). Logs are never committed.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parents[1] / "results"


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
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version()}  # fmt: skip


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one run's record (a crash loses at most the run in progress)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a ``runs.jsonl``, none when it does not exist."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1) + "\n")


def write_report(out: Path, summary: dict[str, Any], lines: Sequence[str]) -> None:
    """A report's ``summary.json`` and ``table.md`` (printed too)."""
    write_json(out / "summary.json", summary)
    text = "\n".join(lines).rstrip() + "\n"
    (out / "table.md").write_text(text)
    print(text)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A markdown table's lines."""
    cells = [[str(c) for c in row] for row in rows]
    return [
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
        *("| " + " | ".join(r) + " |" for r in cells),
    ]


def ratio(value: float | None, spec: str = ".2f") -> str:
    """A ratio of seconds (below 1 pays), or ``never`` where the family never reaches the target."""
    return "never" if value is None else format(value, spec)
