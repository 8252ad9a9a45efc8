"""Every benchmark runs end to end through ``python -m benchmarks NAME`` in its seconds-long smoke mode and writes the
outputs its README shows; the layout keeps one harness (one run loop, one timing loop, one cost model) and no
benchmark folder imports another."""

import ast
import importlib.util
import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.harness.stats import at_cost, reach

ROOT = Path(__file__).resolve().parents[2]
PLOTS = importlib.util.find_spec("matplotlib") is not None


def run(name: str, *args: str, timeout: float = 300) -> None:  # a hang guard, not a speed check
    cmd = [sys.executable, "-m", "benchmarks", name, *args]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=timeout, capture_output=True, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["clean100k", "noisy100k", "mlp100k", "cache100k"])
def test_time_to_accuracy_smoke(tmp_path, suite):
    run("time_to_accuracy", suite, "--smoke", "--out", str(tmp_path))
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
    run("time_to_accuracy", "sweep", "--smoke", "--out", str(tmp_path))
    best = json.loads((tmp_path / "sweep" / "best.json").read_text())
    assert best and all({"keep", "start", "pooled"} <= set(cfg) for cfg in best.values())
    run("time_to_accuracy", "report", "--out", str(tmp_path))
    assert (tmp_path / "sweep" / "table.md").exists()


@pytest.mark.slow
def test_overhead_smoke(tmp_path):
    run("overhead", "--smoke", "--out", str(tmp_path))
    results = json.loads((tmp_path / "main" / "summary.json").read_text())
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


def test_the_calibrated_model_times_every_call_in_the_one_timing_loop():
    """A clock that advances by each call's known cost: every call is timed ``rounds * block`` times after one
    warm-up, the medians are those costs, and an engine step's overhead is its time less a scoring forward's."""
    from benchmarks.harness._sb import sb_step_seconds
    from benchmarks.harness.cost import calibrate
    from benchmarks.harness.models import MLP

    now, calls = [0.0], {"engine": 0}
    x, y = torch.randn(64, 1, 40), torch.randint(0, 10, (64,))

    def engine() -> None:
        calls["engine"] += 1
        now[0] += 0.5  # the engine step costs 0.5 s, every other call nothing: all of it overhead

    costs = calibrate(MLP, x, y, train_sizes=[32], score_sizes=[64], engine_steps={"topk": engine}, engine_batch=64,
                      block=2, rounds=3, clock=lambda: now[0])  # fmt: skip
    assert calls["engine"] == 1 + 2 * 3
    assert costs.train == {32: 0.0} and costs.data == {32: 0.0} and costs.overhead == {"topk": 0.5}
    assert costs.score == {64: 0.0} and sb_step_seconds(costs, 64, 32, overhead="topk") == 0.5


def test_endless_steps_prefill_one_epoch_unyielded():
    from benchmarks.harness.train import endless

    class Batches(list):
        def set_epoch(self, epoch: int) -> None:
            epochs.append(epoch)

    batches, seen, epochs = Batches([1, 2, 3]), [], []
    steps = endless(batches, seen.append, prefill=True, epoch=4)
    assert list(itertools.islice(steps, 4)) == [1, 2, 3, 4] and seen == [1, 2, 3] * 2 + [1]
    assert epochs == [4, 5, 6]


@pytest.mark.slow
def test_throughput_smoke(tmp_path):
    run("throughput", "--smoke", "--out", str(tmp_path))
    results = json.loads((tmp_path / "main" / "summary.json").read_text())
    timing = results["families"]["mlp"]["steps"]
    assert "plain batch B" in timing and any("topk" in kind for kind in timing)
    assert all(min(r["seconds_per_loader_batch"], r["predicted_seconds_per_loader_batch"]) > 0 for r in timing.values())
    assert set(results["families"]["mlp"]["costs"]) == {"data", "train", "plain", "score", "overhead"}
    assert results["timing"]["torch_threads"] == 1 and "allocator" in results["timing"]
    assert "| mlp | plain batch B |" in (tmp_path / "main" / "table.md").read_text()


def test_gpu_smoke(tmp_path):
    """The GPU benchmark runs end to end on the CPU (CI has no GPU): every arm timed, the sync check reported."""
    run("gpu", "--smoke", "--out", str(tmp_path))
    results = json.loads((tmp_path / "main" / "summary.json").read_text())
    arms = results["timing"]["8/64"]
    assert set(arms) == {"baseline", "small-batch", "sb-topk", "sb-cache-observe"}
    assert all(r["seconds_per_epoch"] > 0 for r in arms.values())
    assert arms["sb-cache-observe"]["scored_share"] < arms["sb-topk"]["scored_share"] == 1.0
    assert results["sync_check"] and "| sync check" in (tmp_path / "main" / "table.md").read_text()


def test_cache_timing_smoke(tmp_path):
    run("cache_timing", "--smoke", "--out", str(tmp_path))
    results = json.loads((tmp_path / "main" / "summary.json").read_text())
    summary = results["summary"]
    assert set(summary) == {"fresh", "cache-s2", "cache-s2-observe", "cache-s2-observe-scored"}
    assert summary["cache-s2"]["samples_scored"] < summary["fresh"]["samples_scored"]
    assert all(row["predicted"] > 0 and row["distinct_sizes"] <= results["buckets"] + 2 for row in summary.values())
    assert summary["cache-s2-observe-scored"]["samples_scored"] < summary["fresh"]["samples_scored"]
    assert all(
        len(summary[name]["ratio_to_no_observe"]) == 3 for name in ("cache-s2-observe", "cache-s2-observe-scored")
    )
    text = (tmp_path / "main" / "table.md").read_text()
    assert "observe / no observe" in text and 'observe (refresh="scored") / no observe' in text


@pytest.mark.slow
def test_pruning_smoke(tmp_path):
    run("pruning", "all", "--smoke", "--out", str(tmp_path), timeout=300)
    assert json.loads((tmp_path / "cnn100k" / "tuned.json").read_text())["batch"] in (64, 256)
    summary = json.loads((tmp_path / "cnn100k" / "summary.json").read_text())
    assert {"baseline-tuned", "prune", "prune-random", "prune+sb", "sb-cache", "baseline"} <= set(summary["arms"])
    assert summary["arms"]["baseline-tuned"]["budgets"]["4"]["x_tuned"] == pytest.approx(1.0)
    assert summary["arms"]["prune"]["loaded_share"] < 1.0  # pruned epochs load fewer samples
    assert "sampler cost <= 3% per step, a few ms per epoch" in summary["verdicts"]
    timing = json.loads((tmp_path / "timing" / "summary.json").read_text())["families"]["cnn"]
    assert {"plain b=64", "prune b=64", "sb-stale b=64", "sb-reuse b=64"} <= set(timing)
    assert "| prune |" in (tmp_path / "cnn100k" / "table.md").read_text()
    loading = json.loads((tmp_path / "loading" / "summary.json").read_text())
    assert loading["pruned"]["samples_loaded"] < loading["full"]["samples_loaded"] == 2000
    if PLOTS:
        assert (tmp_path / "cnn100k" / "accuracy_vs_seconds.png").stat().st_size > 0


def test_wide_candidates_read_batch_over_keep():
    """The fixed layout's "wide" candidates score B / keep per output batch of B (keep_count caps at n, so it cannot
    compute B / keep)."""
    from benchmarks.harness.arms import Arm
    from benchmarks.harness.data import Data
    from benchmarks.harness.models import MODELS

    data = Data(torch.randn(64, 1, 40), torch.randint(0, 10, (64,)), torch.randn(8, 1, 40), torch.zeros(8).long())
    arm = Arm("wide", policy="topk", keep=0.25, pooled=True, candidates="wide")
    loader, probe = arm.build(MODELS["mlp"](), data, family="mlp", batch=8, epochs=1, seed=0)
    assert probe.loader_batches_per_epoch == 2  # 64 samples in candidate batches of 32
    assert [len(batch[1]) for batch in loader] == [8, 8]


@pytest.mark.slow
def test_auto_benchmark_smoke(tmp_path):
    run("auto", "all", "--smoke", "--jobs", "1", "--out", str(tmp_path))
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert set(summary["suites"]) == {"cnn100k", "mlp100k", "noisy100k"}
    for suite in summary["suites"].values():
        arms = suite["arms"]
        assert {"user", "tuned", "topk-0.25", "random-0.25", "importance-gradnorm-0.25", "auto", "auto-topk"} <= set(
            arms
        )
        assert 0 < arms["user"]["to_user_x"] <= 1.0  # the seed-mean curve reaches its own mean accuracy by its end
        for auto in (arms["auto"], arms["auto-topk"]):
            assert 0.0 <= auto["on_share"] <= 1.0 and auto["predicted_speedup"] > 0
            if auto["on_share"] == 0.0 and auto["trial_share"] == 0.0:  # no trial: exactly the user's recipe
                assert auto["same_as_user"]
    assert summary["suites"]["noisy100k"]["arms"]["topk-0.25"]["noisy_share"] is not None
    assert summary["timing"]["ratio"] > 0 and summary["timing"]["every"] == 1024
    assert set(summary["lm"]) == {"single-pass", "repeating"}
    assert {"baseline", "auto", "importance-gradnorm-0.5-shrink"} <= set(summary["lm"]["repeating"])
    assert any(name.endswith("never loses") for name in summary["targets"])
    assert "## Targets" in (tmp_path / "report" / "table.md").read_text()
    if PLOTS:
        assert (tmp_path / "report" / "decisions.png").stat().st_size > 0


@pytest.mark.slow
def test_calibration_smoke(tmp_path):
    """One table: every fixed arm and the small-batch control, predicted beside measured. Known answers that read no
    clock: with the fixed cost table, each prediction is ``shrink_speedup`` of the recorded tau; "integrated" is the
    mean of the four points; and advise leaves the plain run exactly as a run without it."""
    from benchmarks.harness.arms import BASELINE
    from benchmarks.harness.data import dataset
    from benchmarks.harness.train import train_run
    from sbdata.auto import CostTable, shrink_speedup, small_batch_speedup

    run("calibration", "all", "--smoke", "--fixed-costs", "--out", str(tmp_path))
    table = (tmp_path / "report" / "table.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| suite"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns[2] == "arm" and columns[4:9] == ["predicted, low-high: start", "25%", "50%", "75%", "integrated"]
    assert columns[9].startswith("measured: mean") and columns[11] == "predicted (low end) / measured"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[4:] if line.startswith("|")]
    assert all(len(row) == len(columns) for row in rows)
    for suite in ("cnn100k", "mlp100k", "noisy100k"):
        arms = {row[2]: row for row in rows if row[0] == suite}
        assert {"topk-0.25", "random-0.25", "importance-0.25", "importance-gradnorm-0.25"} <= set(arms)
        summary = json.loads((tmp_path / suite / "summary.json").read_text())
        if suite != "noisy100k":  # the noisy time-to-accuracy suite has no small-batch control; priced at its batch
            (small,) = [row for row in summary["rows"] if row["arm"] == "baseline-small-batch"]
            keep = small["priced"]["keep"]
            assert (
                small["priced"]["small_batch"]
                and small["predicted"] == summary["predicted"]["loss"]["small_batch"][keep]
            )
            low, high = arms["baseline-small-batch"][4].split("-")
            assert float(low) == pytest.approx(small["predicted"][0], abs=0.005)
            assert float(high) == pytest.approx(small["predicted_high"][0], abs=0.005)
        for row in summary["rows"]:
            if row["predicted"] is not None:
                assert row["integrated"] == pytest.approx(sum(row["predicted"]) / 4)
                assert row["integrated_high"] == pytest.approx(sum(row["predicted_high"]) / 4)
                assert all(lo <= hi for lo, hi in zip(row["predicted"], row["predicted_high"], strict=True))
            if row["measured_mean"] is None and row["ratio"] is None and not row["measured_missing"]:
                assert "never" in arms[row["arm"]][9]
        (record,) = [json.loads(line) for line in (tmp_path / suite / "runs.jsonl").read_text().splitlines()]
        assert [i["at"] for i in record["inspections"]] == [0.0, 0.25, 0.5, 0.75]
        for point in record["inspections"]:
            for score in ("loss", "gradnorm"):
                got = point[score]
                fe = CostTable.forward_equivalents()
                for keep, speedup in got["speedup"].items():
                    expected = shrink_speedup(got["tau"], float(keep), got["batch"], fe)
                    assert speedup == pytest.approx(expected, rel=1e-12)
                    high = shrink_speedup(got["tau"], float(keep), got["batch"], fe, noise_scale=0.0)
                    assert got["speedup_high"][keep] == pytest.approx(high, rel=1e-12)
                    small = [small_batch_speedup(float(keep), got["batch"], fe, ns) for ns in (math.inf, 0.0)]
                    assert got["small_batch"][keep] == pytest.approx(small, rel=1e-12)
    samples, family, noise, epochs = 2000, "cnn", 0.0, 2
    plain = train_run(dataset(samples, noise=noise), BASELINE, family=family, epochs=epochs, seed=0, evals=8)
    (record,) = [json.loads(line) for line in (tmp_path / "cnn100k" / "runs.jsonl").read_text().splitlines()]
    assert record["accuracy"] == plain["accuracy"]  # advise on the live model changed nothing in the run


@pytest.mark.slow
def test_calibration_trial_smoke(tmp_path):
    """advise's branch trial along the plain run: every option at every point, priced by the fixed cost table (no
    clock read), the plain run left exactly as a run without it, and the report's agreement rule on known records."""
    from benchmarks.calibration.trial import SMOKE_EPOCHS, SMOKE_SAMPLES, SMOKE_TRIAL
    from benchmarks.harness.arms import BASELINE
    from benchmarks.harness.branch_trials import agrees, named
    from benchmarks.harness.data import dataset
    from benchmarks.harness.models import RECIPES
    from benchmarks.harness.train import train_run

    run("calibration", "trial", "mlp100k", "--smoke", "--fixed-costs", "--out", str(tmp_path))
    runs = (tmp_path / "trial" / "mlp100k" / "runs.jsonl").read_text()
    (record,) = [json.loads(line) for line in runs.splitlines()]
    assert [i["at"] for i in record["inspections"]] == [0.0, 0.25, 0.5, 0.75]
    batch = RECIPES["mlp"]["batch"]
    for point in record["inspections"]:
        rows = {row["option"]: row for row in point["trial"]}
        assert list(rows) == ["no selection", "top-k keep=0.25", "random keep=0.25", "smaller batch 64",
                              "top-k keep=0.5", "random keep=0.5", "smaller batch 128"]  # fmt: skip
        assert point["trial_steps"] == SMOKE_TRIAL
        assert rows["no selection"]["seconds"] == SMOKE_TRIAL * 3 * batch  # priced: forward equivalents
        assert rows["top-k keep=0.25"]["seconds"] == SMOKE_TRIAL * (batch + 3 * batch // 4)
        assert all(len(row["curve"]) == 9 for row in rows.values())  # the start and 8 checkpoints
    run("calibration", "trial-report", "--out", str(tmp_path))
    assert "## mlp100k" in (tmp_path / "trial" / "report" / "table.md").read_text()
    plain = train_run(dataset(SMOKE_SAMPLES), BASELINE, family="mlp", epochs=SMOKE_EPOCHS, seed=0, evals=8)
    assert record["accuracy"] == plain["accuracy"]  # the trial trained copies: the run is as without it
    assert named("measured: top-k keep=0.25 at 1.93x the speed") == "top-k keep=0.25"
    assert named("train on whole batches: no option measured") == "whole batches"
    wins, loses, mixed = {"topk-0.25": (2.0, 3, 3)}, {"topk-0.25": (None, 0, 3)}, {"topk-0.25": (1.2, 2, 3)}
    assert agrees("top-k keep=0.5", wins) and not agrees("smaller batch 64", wins)
    assert agrees("whole batches", loses) and agrees("top-k keep=0.25", loses) is False
    assert agrees("top-k keep=0.5", loses) is None  # no whole-run record of keep 0.5 there
    assert agrees("top-k keep=0.25", mixed) is None and agrees("top-k keep=0.25", {}) is None
    assert agrees("smaller batch 64", {**wins, "small-batch": (1.2, 3, 3)}) and agrees("smaller batch 64", wins) is None
    assert agrees("smaller batch 64", {**loses, "small-batch": (0.8, 3, 3)}) is False
    assert agrees("whole batches", {**loses, "small-batch": (1.2, 3, 3)}) is False


def test_calibration_names_the_option_advise_recommends_and_what_stands_for_it():
    """A recommended cached option is reported in full and judged by its share's fresh-scoring measurement (no
    cached arm was measured): never silently as the fresh option itself."""
    from benchmarks.calibration.report import _named

    said = "select: keep=0.25 + LossCache(staleness=2) (the default) is predicted 1.53x-1.89x the progress"
    assert _named(said) == ("keep=0.25 + LossCache(staleness=2)", "keep=0.25")
    assert _named("select: keep=0.5 (the default) is predicted 1.2x") == ("keep=0.5", "keep=0.5")
    assert _named("select: keep=0.75 (the default) is predicted 1.2x") == ("keep=0.75", None)
    assert _named("train on whole batches: even where only seconds count") == ("whole batches", "whole batches")
    assert _named("measure it: keep=0.5 is predicted 0.9x-1.1x") == (None, None)


# ----------------------------------------------------------------- the layout: one harness, folders that share nothing
BENCHMARKS = ROOT / "benchmarks"
FOLDERS = {
    "time_to_accuracy", "throughput", "overhead", "lm", "auto", "pruning", "cache_timing", "streaming", "gpu",
    "calibration", "digits", "frontier", "scoring_agreement",
}  # fmt: skip


def benchmark_folders() -> set[str]:
    """Every benchmark folder: one with a ``run.py``."""
    return {path.parent.name for path in BENCHMARKS.glob("*/run.py")}


def imported_benchmark_folders(path: Path, folder: str) -> set[str]:
    """The folders of ``benchmarks`` a file in ``benchmarks/<folder>/`` imports, by name: absolute imports
    (``benchmarks.X``, ``from benchmarks import X``), relative ones (``from . import``: its own folder; ``from ..X``,
    ``from .. import X``: folder X), at any depth of the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and (module == "benchmarks" or module.startswith("benchmarks.")):
                parts = module.split(".")
                found.update([parts[1]] if len(parts) > 1 else [alias.name for alias in node.names])
            elif node.level == 1:
                found.add(folder)
            elif node.level == 2:
                found.update([module.split(".")[0]] if module else [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "benchmarks" and len(parts) > 1:
                    found.add(parts[1])
    return found


def launched_benchmarks(path: Path) -> set[str]:
    """The benchmarks a file starts as commands: ``"benchmarks", "<name>"`` next to each other in a list or tuple,
    or a ``"benchmarks.<name>"`` module string."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.List, ast.Tuple)):
            strings = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None for e in node.elts]
            found.update(b for a, b in itertools.pairwise(strings) if a == "benchmarks" and b)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("benchmarks."):
            found.add(node.value.split(".")[1])
    return found


def test_no_benchmark_folder_imports_another():
    folders = benchmark_folders()
    assert folders >= FOLDERS  # the scan sees every benchmark
    offenders = {}
    for folder in sorted(folders | {"harness"}):
        for path in sorted((BENCHMARKS / folder).rglob("*.py")):
            others = (imported_benchmark_folders(path, folder) | launched_benchmarks(path)) & folders - {folder}
            if others:
                offenders[str(path.relative_to(ROOT))] = sorted(others)
    assert not offenders, (
        f"benchmark folders import (or run) one another; move the shared code to harness/: {offenders}"
    )


def test_the_benchmark_import_scan_finds_every_spelling(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        "from . import arms, report\nfrom .arms import PruneArm\nfrom .. import overhead\nfrom ..lm.report import at\n"
        "from benchmarks.auto import run\nfrom benchmarks import throughput\nimport benchmarks.gpu.run\n"
        "import torch\nfrom torch import nn\n"
        "def f():\n    from benchmarks.harness.runs import run_suite\n    from ..streaming import run\n"
    )
    assert imported_benchmark_folders(source, "pruning") == {
        "pruning", "overhead", "lm", "auto", "throughput", "gpu", "harness", "streaming",
    }  # fmt: skip
    source.write_text(
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'benchmarks', 'lm', 'all'])\n"
        "subprocess.run([sys.executable, '-m', 'benchmarks.cache_timing'])\n"
        "x = ('python', 'benchmarks')\n"
    )
    assert launched_benchmarks(source) == {"lm", "cache_timing"}


def definitions(root: Path) -> dict[str, list[str]]:
    """Where each function or method name under ``root`` is defined (``def`` lines), as relative paths."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(node.name, []).append(str(path.relative_to(root)))
    return found


def test_one_run_loop_one_timing_loop_one_cost_model():
    """One definition each of the run loop, the interleaved timing loop and the cost model's pricing functions, all
    in the harness (the calibrated model too); sbdata's pricing is imported, never copied; no other rotating loop."""
    defined = definitions(BENCHMARKS)
    one = {
        "run_loop": "harness/runs.py",  # the run loop
        "interleaved": "harness/timing.py",  # the timing loop
        "rotated": "harness/timing.py",  # its (and the run loop's) rotating order
        "priced": "harness/cost.py",  # the cost model's pricing (sbdata's CostTable) ...
        "cost_per_epoch": "harness/cost.py",
        "step_kind": "harness/cost.py",  # ... what a step is ...
        "suite_arm_seconds": "harness/cost.py",  # ... and the seconds it prices
        "pruning_run_seconds": "harness/cost.py",
        "frontier_run_seconds": "harness/cost.py",
        "frontier_limits": "harness/cost.py",
        "calibrate": "harness/cost.py",  # the calibrated model's timing (the model itself is sbdata's)
        "inputs_targets": "harness/data.py",  # sbdata's split= of a tuple batch
        "spawn": "harness/runs.py",  # the one worker spawner
    }
    for name, where in one.items():
        assert defined.get(name) == [where], f"{name} is defined in {defined.get(name)}: one definition, in {where}"
    copies = ("priced_seconds", "shrink_speedup", "pool_speedup", "forward_equivalents", "score_share", "best_keep")
    copies += ("costs_from", "sb_step_seconds", "calibration_calls", "_at")  # the calibrated model (sbdata.auto)
    assert not {name: defined[name] for name in copies if name in defined}, "sbdata's pricing is imported, not copied"
    rotation = re.compile(r"\[\s*[^\[\]]+%\s*len\([^()]*\)\s*:")  # names[r % len(names) :] + names[: ...]
    loops = [
        str(path.relative_to(ROOT))
        for path in sorted(BENCHMARKS.rglob("*.py"))
        if rotation.search(path.read_text()) and path != BENCHMARKS / "harness" / "timing.py"
    ]
    assert not loops, f"rotating loops outside harness/timing.py (use interleaved or rotated): {loops}"


def test_one_training_step_and_one_spawner():
    """Every benchmark trains through the harness's step (``harness/train.py``): ``.backward()`` elsewhere only in the
    calibrated cost model's timed training call, the overhead benchmark's timed block (the hand-written loop it
    measures the wrapper against) and the pruning sampler's timed cost; worker processes start in ``harness/runs.py``
    alone."""
    allowed = {"harness/train.py", "harness/cost.py", "overhead/run.py", "pruning/run.py"}
    stepping = {str(p.relative_to(BENCHMARKS)) for p in BENCHMARKS.rglob("*.py") if ".backward()" in p.read_text()}
    assert stepping <= allowed, stepping - allowed
    spawning = {str(p.relative_to(BENCHMARKS)) for p in BENCHMARKS.rglob("*.py") if "Popen(" in p.read_text()}
    assert spawning == {"harness/runs.py"}, spawning


def test_every_import_from_sbdata_is_in_one_harness_module():
    """sbdata's modules move: every name the benchmarks take from it comes through ``harness/_sb.py``."""
    offenders = []
    for path in sorted(BENCHMARKS.rglob("*.py")):
        if path == BENCHMARKS / "harness" / "_sb.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            modules += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if any(m == "sbdata" or m.startswith("sbdata.") for m in modules):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"imports from sbdata outside benchmarks/harness/_sb.py: {offenders}"


def test_the_dispatcher_lists_every_benchmark():
    listed = subprocess.run(
        [sys.executable, "-m", "benchmarks"], cwd=ROOT, check=True, capture_output=True, text=True, timeout=60
    ).stdout
    names = {line.split()[0] for line in listed.splitlines()[1:] if line.strip()}
    assert names == benchmark_folders() >= FOLDERS
    for folder in FOLDERS:  # each with its entry, its README, and results in benchmarks/results/<benchmark>/<suite>/
        assert (BENCHMARKS / folder / "README.md").exists(), folder


EARLIER_TIMING = re.compile(r"timing-\d{4}-\d{2}-\d{2}(-[a-z-]+)?\.json")


def test_recorded_results_follow_one_layout():
    """``benchmarks/results/<benchmark>/<record>/``, a record over several suites one folder per suite inside
    (``<record>/<suite>/``, its cross-suite table in ``<record>/report/``), with runs.jsonl, machine.json, summary.json,
    table.md, plots; no logs or marker files; every benchmark's recorded results name the commit they were made at."""
    allowed = {"runs.jsonl", "machine.json", "summary.json", "table.md", "tuned.json", "best.json", "raw.json"}
    allowed |= {"tune.jsonl", "tune_equal_fe.jsonl", "probe_saturating_tune.jsonl", "wall.json"}  # the LM grids
    allowed |= {"timing.json", "pretrained.json"}  # the frontier suites' step timing and pretrained accuracies
    allowed |= {"back-to-back.json"}  # a frontier suite's check of its price table's back-to-back column
    # and a suite's earlier timings beside timing.json (timing-<date>[-label].json), read by its band across timings
    tracked = subprocess.run(
        ["git", "ls-files", "benchmarks/results"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    odd = []
    for name in tracked:
        parts = Path(name).relative_to("benchmarks/results").parts
        if parts[-1] == "README.md" and len(parts) == 2:
            assert "made_at_commit" in (ROOT / name).read_text(), name
            continue
        if (
            len(parts) not in (3, 4)
            or parts[0] not in FOLDERS
            or not (parts[-1] in allowed or parts[-1].endswith(".png") or EARLIER_TIMING.fullmatch(parts[-1]))
        ):
            odd.append(name)
    records = {
        Path(name).parent.relative_to("benchmarks/results") for name in tracked if Path(name).name != "README.md"
    }
    mixed = sorted(str(r) for r in records if any(r.parent == other for other in records))
    assert not odd, f"results outside benchmarks/results/<benchmark>/<record>/[<suite>/] or with another name: {odd}"
    assert not mixed, f"a record's files beside its suites' folders (keep them in <record>/report/): {mixed}"
