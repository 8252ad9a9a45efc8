"""The quickstart runs end to end as the README runs it (a script), small; the examples' shared data loader."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# Seconds per call (as examples/costmodel.Costs.as_dict()), for --small: 1600 training samples, batch 256 (the last
# of 64), keep 0.33 (85, the last of 70); scoring at the cache's bucket sizes.
FIXED_COSTS = {
    "data": {"256": 1e-3, "85": 4e-4},
    "train": {"256": 6e-3, "85": 3e-3, "64": 2e-3, "70": 2.5e-3},
    "plain": {"256": 6e-3, "85": 3e-3},
    "score": {"64": 6e-4, "128": 1e-3, "192": 1.3e-3, "256": 1.6e-3},
    "overhead": {"sb": 3e-5},
}


@pytest.mark.slow
def test_quickstart_small_runs_end_to_end(tmp_path):
    out_path, costs_path = tmp_path / "results.json", tmp_path / "costs.json"
    costs_path.write_text(json.dumps(FIXED_COSTS))  # no calibration: the control rows cannot depend on a clock
    command = [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--small", "--no-progress", "--json", out_path]
    command += ["--costs", costs_path]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # sbdata from this checkout, installed or not
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "baseline" in run.stdout and "SB top-k keep=0.33" in run.stdout
    results = json.loads(out_path.read_text())
    assert results.pop("costs") == FIXED_COSTS
    # Priced by the fixed table: SB's 7 loader batches cost 7 * (1 + 0.03 + 3) ms plus scoring 6 * 1.6 + 0.6 ms (the
    # last batch's 64) = 38.4 ms, under one baseline epoch (7 * 7 = 49 ms), so no shorter baseline runs; batch 85 for
    # 1 epoch (19 * 3.4 = 65 ms) is the nearest small-batch control.
    assert list(results) == ["baseline", "SB top-k keep=0.33", "SB + LossCache(2)", "batch 85, 1 epochs"]
    assert results["SB top-k keep=0.33"]["predicted_seconds"] == pytest.approx(7 * 4.03e-3 + 6 * 1.6e-3 + 6e-4)
    assert results["batch 85, 1 epochs"]["backprop_fraction"] == 1.0  # the small-batch control trains on everything
    sb = results["SB top-k keep=0.33"]
    assert abs(sb["backprop_fraction"] - 0.33) < 0.02  # ceil(0.33 * 256) per batch, plus the short last batch
    assert sb["forward_equivalents"] < results["baseline"]["forward_equivalents"]
    cached = results["SB + LossCache(2)"]  # one epoch: nothing is cached yet, so it scores what SB scores
    assert cached["backprop_fraction"] == sb["backprop_fraction"]
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["predicted_seconds"] > 0 for r in results.values())


def test_load_mnist1d_restores_global_rngs():
    import random

    import numpy as np

    from examples.common import load_mnist1d

    np.random.seed(7)
    random.seed(7)
    expected = (np.random.random(), random.random())
    np.random.seed(7)
    random.seed(7)
    split = load_mnist1d(200)
    assert (np.random.random(), random.random()) == expected
    assert split.x_train.shape == (160, 1, 40) and split.x_train.dtype.is_floating_point
    assert split.y_test.shape == (40,)
