"""The streaming benchmark runs in its smoke mode and reports what benchmarks/streaming/README.md quotes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a benchmark end to end

ROOT = Path(__file__).resolve().parents[2]


def test_streaming_benchmark_smoke(tmp_path):
    out = tmp_path / "smoke" / "summary.json"
    subprocess.run(
        [sys.executable, "-m", "benchmarks", "streaming", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
        timeout=300,
    )
    result = json.loads(out.read_text())
    for name in ("pipeline", "pipeline_with_stage", "stage_alone", "stage_alone_mlp", "scoring_forward_mlp"):
        assert result[name]["samples_per_s"] > 0, name
    memory = result["memory"]
    assert memory["samples_seen"] == 4096 and memory["samples_yielded"] == 2048  # keep=0.5 of every batch
    assert memory["stage_pending_at_end"] == 0
    assert {"rss_mib", "peak_mib"} <= set(memory["start"]) and {"rss_mib", "peak_mib"} <= set(memory["end"])
    assert not list(tmp_path.rglob("*.png"))  # no plot in smoke mode
