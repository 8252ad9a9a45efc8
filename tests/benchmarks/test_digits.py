"""The digits benchmark (scikit-learn's 8x8 digits, a suite nobody tuned on) runs end to end in its smoke mode and
writes the records its report reads: every arm on every seed, the test curve at its evaluations, auto's statistics."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARMS = {"user", "topk-0.25", "topk-0.5", "random-0.25", "small-batch", "auto"}


@pytest.mark.slow
def test_digits_smoke(tmp_path):
    pytest.importorskip("sklearn")
    from benchmarks.digits.run import SMOKE_EPOCHS, SMOKE_EVALS, SMOKE_SEEDS

    cmd = [sys.executable, "-m", "benchmarks", "digits", "--smoke", "--out", str(tmp_path)]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=300, capture_output=True, text=True)  # a hang guard
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert {(r["arm"], r["seed"]) for r in records} == {(arm, seed) for arm in ARMS for seed in SMOKE_SEEDS}
    assert len(records) == len(ARMS) * len(SMOKE_SEEDS)  # one run each, none twice
    for r in records:
        assert r["epochs"] == SMOKE_EPOCHS and len(r["curve"]) == SMOKE_EVALS
        assert r["curve"][-1]["progress"] == 1.0 and 0.0 <= r["accuracy"] <= 1.0 and r["seconds"] > 0
        batches = 45 if r["arm"] == "small-batch" else 12  # 1,437 training images at batch 32 / 128
        assert r["steps"] == SMOKE_EPOCHS * batches
    for r in records:
        if r["arm"] == "auto":
            assert {"on_share", "trials", "reason", "trial_share"} <= set(r["auto"])
        else:
            assert "auto" not in r
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["arms"]) == ARMS and all(a["seeds"] == len(SMOKE_SEEDS) for a in summary["arms"].values())
    table = (tmp_path / "table.md").read_text()
    assert "| user |" in table and "Did auto trial?" in table and "## Targets (auto)" in table
    assert json.loads((tmp_path / "machine.json").read_text())["torch_threads"] == 1


@pytest.mark.slow
def test_digits_trial_smoke(tmp_path):
    """advise's branch trial on the user's digits run: seven options at the start and a quarter of the run, priced by
    the fixed cost table in smoke mode (no clock read), the run's own training untouched by it."""
    pytest.importorskip("sklearn")
    from benchmarks.digits.trial import POINTS, SMOKE_SEEDS, SMOKE_TRIAL

    cmd = [sys.executable, "-m", "benchmarks", "digits", "trial", "--smoke", "--out", str(tmp_path)]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=300, capture_output=True, text=True)
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in records] == list(SMOKE_SEEDS)
    for point in records[0]["inspections"]:
        assert point["trial_steps"] == SMOKE_TRIAL and len(point["trial"]) == 7
        plain = next(row for row in point["trial"] if row["option"] == "no selection")
        # forward equivalents, 3 per trained sample: the advisor's loader holds 1,437 - 288 = 1,149 images, 8 batches
        # of 128 and one of 125 an epoch; after 4 timed batches the 16 trial batches are the epoch's other 5, a whole
        # epoch of 9 and 2 of the next: 14 of 128 and 2 of 125
        assert plain["seconds"] == 3 * (14 * 128 + 2 * 125)
    assert [i["at"] for i in records[0]["inspections"]] == list(POINTS)
    table = (tmp_path / "table.md").read_text()
    assert "## digits (whole run:" in table and "| 0.00 |" in table and "| 0.25 |" in table
