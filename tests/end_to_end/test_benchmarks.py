"""Every benchmark script runs end to end in its seconds-long smoke mode and writes the outputs the README shows."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks._report import at_cost, reach

ROOT = Path(__file__).resolve().parents[2]
PLOTS = importlib.util.find_spec("matplotlib") is not None


def run(script: str, *args: str, timeout: float = 300) -> None:  # a hang guard, not a speed check
    cmd = [sys.executable, "-m", f"benchmarks.{script.removesuffix('.py')}", *args]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=timeout, capture_output=True, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["clean100k", "noisy100k", "mlp100k", "cache100k"])
def test_time_to_accuracy_smoke(tmp_path, suite):
    run("time_to_accuracy.py", suite, "--smoke", "--out", str(tmp_path))
    out = tmp_path / suite
    records = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert {"arm", "epochs", "seed", "accuracy", "fe", "seconds", "curve", "config"} <= set(records[0])
    assert {(r["arm"], r["epochs"]) for r in records} == {(r["arm"], r["epochs"]) for r in records if r["seed"] == 0}
    summary = json.loads((out / "summary.json").read_text())
    assert {"target_accuracy", "reference_cost", "equal_cost_fe", "arms"} <= set(summary)
    row = summary["arms"]["baseline"]
    assert row["reach_fe"] == pytest.approx(1.0)  # the baseline reaches its own final accuracy at its own cost
    assert {"reach_seconds", "first_fe", "equal_cost_mean", "budgets"} <= set(row)
    assert "| baseline |" in (out / "table.md").read_text()
    if suite == "noisy100k":
        assert "reducible" in summary["arms"] and records[0]["noisy_share"] is not None
    if suite == "cache100k":  # the cached arm reuses losses: it scored fewer samples than its SB steps saw
        cached = [r for r in records if r["arm"] == "cache-s2-observe"]
        assert cached and all(r["samples_reused"] > 0 for r in cached if r["epochs"] > 3)
        assert "scoring forwards saved" in (out / "table.md").read_text()
    if PLOTS:
        assert (out / "accuracy_vs_cost.png").stat().st_size > 0 and (out / "curves.png").exists()


@pytest.mark.slow
def test_sweep_smoke_writes_choice(tmp_path):
    run("time_to_accuracy.py", "sweep", "--smoke", "--out", str(tmp_path))
    best = json.loads((tmp_path / "sweep" / "best.json").read_text())
    assert best and all({"keep", "start", "pooled"} <= set(cfg) for cfg in best.values())
    run("time_to_accuracy.py", "report", "--out", str(tmp_path))
    assert (tmp_path / "sweep" / "table.md").exists()


@pytest.mark.slow
def test_overhead_smoke(tmp_path):
    run("overhead.py", "--smoke", "--out", str(tmp_path))
    results = json.loads((tmp_path / "overhead.json").read_text())
    for mode in ("select", "step"):
        arms = results["models"]["tiny"][mode]["arms"]
        assert {"hand-written", "SBLoader"} <= set(arms)
        for arm in arms.values():
            assert {"median_ms", "ratio_median", "aten_ops", "python_calls"} <= set(arm)
            assert arm["forwards"] == (1 if mode == "select" else 2)  # one scoring forward (+ one training)
        assert arms["SBLoader"]["yielded_per_step"] == arms["hand-written"]["yielded_per_step"]


def test_cost_interpolation():
    curve = [(1.0, 0.90), (2.0, 0.95), (4.0, 0.97)]
    assert reach(curve, 0.96) == (3.0, "interpolated")
    assert reach(curve, 0.85) == (1.0, "at or below")
    assert reach(curve, 0.99) == (None, "never")
    assert at_cost(curve, 1.5) == pytest.approx(0.925)
    assert at_cost(curve, 5.0) is None


@pytest.mark.slow
def test_throughput_smoke(tmp_path):
    run("throughput.py", "--smoke", "--out", str(tmp_path))
    results = json.loads((tmp_path / "throughput.json").read_text())
    timing = results["families"]["mlp"]["steps"]
    assert "plain batch B" in timing and any("topk" in kind for kind in timing)
    assert all(min(r["seconds_per_loader_batch"], r["predicted_seconds_per_loader_batch"]) > 0 for r in timing.values())
    assert set(results["families"]["mlp"]["costs"]) == {"data", "train", "plain", "score", "overhead"}
    assert results["timing"]["torch_threads"] == 1 and "allocator" in results["timing"]
    assert "| mlp | plain batch B |" in (tmp_path / "table.md").read_text()


def test_gpu_smoke(tmp_path):
    """The GPU benchmark runs end to end on the CPU (CI has no GPU): every arm timed, the sync check reported."""
    run("gpu.py", "--smoke", "--out", str(tmp_path))
    results = json.loads((tmp_path / "gpu.json").read_text())
    arms = results["timing"]["8/64"]
    assert set(arms) == {"baseline", "small-batch", "sb-topk", "sb-cache-observe"}
    assert all(r["seconds_per_epoch"] > 0 for r in arms.values())
    assert arms["sb-cache-observe"]["scored_share"] < arms["sb-topk"]["scored_share"] == 1.0
    assert results["sync_check"] and "| sync check" in (tmp_path / "table.md").read_text()


def test_cache_timing_smoke(tmp_path):
    run("cache_timing.py", "--smoke", "--out", str(tmp_path))
    results = json.loads((tmp_path / "cache_timing.json").read_text())
    summary = results["summary"]
    assert set(summary) == {"fresh", "cache-s2", "cache-s2-observe", "cache-s2-observe-scored"}
    assert summary["cache-s2"]["samples_scored"] < summary["fresh"]["samples_scored"]
    assert all(row["predicted"] > 0 and row["distinct_sizes"] <= results["buckets"] + 2 for row in summary.values())
    assert summary["cache-s2-observe-scored"]["samples_scored"] < summary["fresh"]["samples_scored"]
    assert all(
        len(summary[name]["ratio_to_no_observe"]) == 3 for name in ("cache-s2-observe", "cache-s2-observe-scored")
    )
    text = (tmp_path / "table.md").read_text()
    assert "observe / no observe" in text and 'observe (refresh="scored") / no observe' in text


@pytest.mark.slow
def test_pruning_smoke(tmp_path):
    run("pruning.py", "all", "--smoke", "--out", str(tmp_path), timeout=300)
    assert json.loads((tmp_path / "prune-cnn100k" / "tuned.json").read_text())["batch"] in (64, 256)
    summary = json.loads((tmp_path / "prune-cnn100k" / "summary.json").read_text())
    assert {"baseline-tuned", "prune", "prune-random", "prune+sb", "sb-cache", "baseline"} <= set(summary["arms"])
    assert summary["arms"]["baseline-tuned"]["budgets"]["4"]["x_tuned"] == pytest.approx(1.0)
    assert summary["arms"]["prune"]["loaded_share"] < 1.0  # pruned epochs load fewer samples
    assert "sampler cost <= 3% per step, a few ms per epoch" in summary["verdicts"]
    timing = json.loads((tmp_path / "prune-timing.json").read_text())["families"]["cnn"]
    assert {"plain b=64", "prune b=64", "sb-stale b=64", "sb-reuse b=64"} <= set(timing)
    assert "| prune |" in (tmp_path / "prune-cnn100k" / "table.md").read_text()
    loading = json.loads((tmp_path / "prune-loading.json").read_text())
    assert loading["pruned"]["samples_loaded"] < loading["full"]["samples_loaded"] == 2000
    if PLOTS:
        assert (tmp_path / "prune-cnn100k" / "accuracy_vs_seconds.png").stat().st_size > 0


def test_wide_candidates_read_batch_over_keep():
    """The fixed layout's "wide" candidates score B / keep per output batch of B (keep_count caps at n, so it cannot
    compute B / keep)."""
    from benchmarks._arms import Arm
    from benchmarks._harness import MODELS, Data

    data = Data(torch.randn(64, 1, 40), torch.randint(0, 10, (64,)), torch.randn(8, 1, 40), torch.zeros(8).long())
    arm = Arm("wide", policy="topk", keep=0.25, pooled=True, candidates="wide")
    loader, probe = arm.build(MODELS["mlp"](), data, family="mlp", batch=8, epochs=1, seed=0)
    assert probe.loader_batches_per_epoch == 2  # 64 samples in candidate batches of 32
    assert [len(batch[1]) for batch in loader] == [8, 8]


@pytest.mark.slow
def test_auto_benchmark_smoke(tmp_path):
    run("auto.py", "all", "--smoke", "--jobs", "1", "--out", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["suites"]) == {"cnn100k", "mlp100k", "noisy100k"}
    for suite in summary["suites"].values():
        arms = suite["arms"]
        assert {"user", "tuned", "topk-0.25", "random-0.25", "importance-gradnorm-0.25", "auto", "auto-topk"} <= set(
            arms
        )
        assert 0 < arms["user"]["to_user_x"] <= 1.0  # the seed-mean curve reaches its own mean accuracy by its end
        for auto in (arms["auto"], arms["auto-topk"]):
            assert 0.0 <= auto["on_share"] <= 1.0 and auto["predicted_speedup"] > 0
            if auto["on_share"] == 0.0:  # off, it trains exactly as the user's recipe: probes change nothing
                assert auto["same_as_user"]
    assert summary["suites"]["noisy100k"]["arms"]["topk-0.25"]["noisy_share"] is not None
    assert summary["timing"]["ratio"] > 0 and summary["timing"]["probe_every"] == 32
    assert set(summary["lm"]) == {"single-pass", "repeating"}
    assert {"baseline", "auto", "importance-gradnorm-0.5-shrink"} <= set(summary["lm"]["repeating"])
    assert any(name.endswith("never loses") for name in summary["targets"])
    assert "## Targets" in (tmp_path / "table.md").read_text()
    if PLOTS:
        assert (tmp_path / "decisions.png").stat().st_size > 0
