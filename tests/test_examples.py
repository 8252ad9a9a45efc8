"""The quickstart runs end to end as the README runs it (a script), small; the examples' shared data loader."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_quickstart_small_runs_end_to_end(tmp_path):
    out_path = tmp_path / "results.json"
    command = [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--small", "--no-progress", "--json", out_path]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # sbdata from this checkout, installed or not
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "baseline" in run.stdout and "SB top-k keep=0.33" in run.stdout
    results = json.loads(out_path.read_text())
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
