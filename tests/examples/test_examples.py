"""The quickstart runs end to end as the README runs it (a script), small, and its verdict reads fixed numbers; the
examples' shared data loader; the plain-PyTorch MNIST loop with one SBLoader line."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))  # the scripts import their siblings (common, costmodel) by name


@pytest.mark.slow
def test_quickstart_small_runs_end_to_end(tmp_path):
    """The smoke mode: every arm trains, the table, legend and verdict print, the JSON holds the arms' results (their
    rows fixed by the configuration, not by a clock), and the progress lines come as promised."""
    out_path, picture = tmp_path / "results.json", tmp_path / "curves.png"
    command = [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--small", "--json", out_path]
    command += ["--plot", picture]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # sbdata from this checkout, installed or not
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "baseline" in run.stdout and "SB top-k keep=0.25 bf16" in run.stdout
    assert "Legend:" in run.stdout and "Verdict: " in run.stdout  # its words read measured seconds: not asserted
    results = json.loads(out_path.read_text())
    assert results.pop("verdict").startswith("Verdict: ")
    curves = results.pop("curves")  # per arm: the median CPU seconds and the test accuracy after each epoch
    assert all(len(c["seconds"]) == len(c["accuracy"]) == results[name]["epochs"] for name, c in curves.items())
    assert all(c["accuracy"][-1] == results[name]["accuracy"] for name, c in curves.items())
    # --small: the baseline 1 epoch, selection and random 2 at keep 0.25 of 256 (64 kept), the small batch 1
    assert {name: r["epochs"] for name, r in results.items()} == {
        "baseline": 1,
        "SB top-k keep=0.25 bf16": 2,
        "random keep=0.25": 2,
        "batch 64, 1 epochs": 1,
    }
    check_progress(run.stderr.splitlines(), arms=list(results), epochs=[1, 2, 2, 1], repeats=2)
    if importlib.util.find_spec("matplotlib") is not None:
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert run.stderr.splitlines()[-1].endswith(f"saved the accuracy-against-seconds curves to {picture}")
    else:
        assert not picture.exists() and "matplotlib is not installed" in run.stderr
    # 1600 training samples in batches of 256 (the last of 64): selection trains 6 * 64 + 16 of each epoch's 1600
    sb = results["SB top-k keep=0.25 bf16"]
    assert sb["backprop_fraction"] == pytest.approx((6 * 64 + 16) / 1600)
    assert results["random keep=0.25"]["backprop_fraction"] == sb["backprop_fraction"]
    assert results["batch 64, 1 epochs"]["backprop_fraction"] == 1.0  # the small-batch control trains on everything
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in results.values())
    assert all(len(r["seconds"]) == len(r["ratios"]) == 2 for r in results.values())  # --small: 2 timed repeats
    assert all(len(set(r["accuracies"])) == 1 for r in results.values())  # every repeat is the same run


def check_progress(lines: list[str], *, arms: list[str], epochs: list[int], repeats: int) -> None:
    """The quickstart's progress, read by structure, not by a clock: a line before the data is generated, one line
    before every epoch of every arm in every repeat, so that no more than one arm's epoch of work passes between two
    lines, after the first repeat the time the others will take, and a last line when training is done."""
    text = [line.split("] ", 1)[1] for line in lines]  # each line opens with the seconds since the start: "[   4s] "
    text = [line for line in text if ": still at it after " not in line]  # a slow machine's heartbeat, by the clock
    assert text[0].startswith("generating MNIST-1D")
    timed = [f"repeat {r + 1}/{repeats}: {name}: epoch {e + 1}/{n}" for r in range(repeats)
             for name, n in zip(arms, epochs, strict=True) for e in range(n)]  # fmt: skip
    assert sorted(line for line in text if ": epoch " in line) == sorted(timed)  # every epoch of every repeat, once
    estimate = [line for line in text if line.startswith(f"the other {repeats - 1} repeats take about ")]
    assert len(estimate) == 1 and text.index(estimate[0]) > text.index(f"repeat 1/{repeats}: baseline: epoch 1/1")
    assert [line for line in text if line.startswith("done:")] == ["done: the table and the verdict follow on stdout"]


@pytest.mark.slow
def test_quickstart_quiet_prints_no_progress(tmp_path):
    command = [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--small", "--quiet", "--plot", ""]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stderr == "" and "Verdict: " in run.stdout and list(tmp_path.iterdir()) == []


# The verdict reads accuracies and ratios only: fixed numbers here, no clock.
KINDS = {"SB top-k keep=0.33": "selection", "random keep=0.33": "random", "batch 85, 4 epochs": "small batch"}


def verdict_for(accuracies: dict[str, float], ratios: dict[str, list[float]]) -> str:
    from quickstart import Timing, verdict

    timings = {name: Timing([], values) for name, values in ratios.items()}
    return verdict({"baseline": 0.97, **accuracies}, timings, KINDS, tolerance=0.25)


def test_the_verdict_says_selection_pays_when_no_control_reaches_the_accuracy_as_fast():
    said = verdict_for(
        {"SB top-k keep=0.33": 0.969, "random keep=0.33": 0.96, "batch 85, 4 epochs": 0.975},
        {"SB top-k keep=0.33": [0.70, 0.72, 0.75], "random keep=0.33": [0.6] * 3, "batch 85, 4 epochs": [0.8] * 3},
    )  # random is faster but a point short; the small batch reaches the accuracy, but slower
    assert said.startswith("Verdict: selection pays here: SB top-k keep=0.33 (time ratio 0.72, 0.70-0.75)")
    assert "ahead of every plain control" in said


def test_the_verdict_names_a_plain_control_that_wins():
    said = verdict_for(
        {"SB top-k keep=0.33": 0.97, "random keep=0.33": 0.96, "batch 85, 4 epochs": 0.975},
        {
            "SB top-k keep=0.33": [0.75, 0.78, 0.8],
            "random keep=0.33": [0.7] * 3,
            "batch 85, 4 epochs": [0.6, 0.62, 0.63],
        },
    )
    assert said.startswith("Verdict: a plain control wins: batch 85, 4 epochs (time ratio 0.62, 0.60-0.63)")
    assert said.endswith("use a smaller batch.")


def test_the_verdict_calls_arms_within_two_standard_errors_tied_and_picks_neither():
    said = verdict_for(
        {"SB top-k keep=0.33": 0.97, "random keep=0.33": 0.97, "batch 85, 4 epochs": 0.96},
        {
            "SB top-k keep=0.33": [0.7, 0.72, 0.74],
            "random keep=0.33": [0.76, 0.71, 0.75],
            "batch 85, 4 epochs": [0.5] * 3,
        },
    )  # paired differences 0.06, -0.01, 0.01: mean 0.02, standard error 0.021: within 2 of them, tied
    assert said.startswith(
        "Verdict: selection does not beat the plain control here: SB top-k keep=0.33 (time ratio 0.72, 0.70-0.74) "
        "and random keep=0.33 (time ratio 0.75, 0.71-0.76) reached the baseline's test accuracy (0.9700, within 0.25 "
        "points), tied within 2 standard errors of the 3 interleaved repeats (the repeats cannot order them)"
    )
    assert said.endswith("choosing samples by loss adds nothing over chance here.")


def test_the_verdict_says_nothing_paid_when_no_arm_is_faster_in_every_repeat():
    said = verdict_for(
        {"SB top-k keep=0.33": 0.969, "random keep=0.33": 0.95, "batch 85, 4 epochs": 0.975},
        {"SB top-k keep=0.33": [0.9, 0.95, 1.01], "random keep=0.33": [0.7] * 3, "batch 85, 4 epochs": [1.1] * 3},
    )
    assert said.startswith("Verdict: nothing paid here")


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


@pytest.mark.slow
def test_the_public_mnist_loop_takes_sbdata_with_one_line(tmp_path):
    """examples/mnist_loop.py, the classic PyTorch loop with ``len(train_loader.dataset)`` in its progress print and
    one SBLoader line, trains and tests as the public example does (tiny: 2000 samples, 2 epochs)."""
    command = [sys.executable, str(ROOT / "examples" / "mnist_loop.py"), "--samples", "2000", "--epochs", "2"]
    command += ["--log-interval", "5", "--no-accel"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # sbdata from this checkout, installed or not
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    # 1600 training samples in batches of 64: 25 loader batches, of which batches 0, 5, ..., 20 print; under
    # selection each trains on ceil(0.5 * 64) = 32 samples, so the count is batch_idx * 32 of the dataset's 1600.
    progress = [line for line in run.stdout.splitlines() if line.startswith("Train Epoch:")]
    assert [line.split("\t")[0] for line in progress[:5]] == [
        "Train Epoch: 1 [0/1600 (0%)]",
        "Train Epoch: 1 [160/1600 (20%)]",
        "Train Epoch: 1 [320/1600 (40%)]",
        "Train Epoch: 1 [480/1600 (60%)]",
        "Train Epoch: 1 [640/1600 (80%)]",
    ]
    assert len(progress) == 10  # 5 per epoch, 2 epochs
    assert run.stdout.count("Test set: Average loss:") == 2
    assert "/400 (" in run.stdout  # the test set's 400 samples


def test_a_steady_gap_between_interleaved_repeats_is_not_a_tie():
    said = verdict_for(
        {"SB top-k keep=0.33": 0.97, "random keep=0.33": 0.97, "batch 85, 4 epochs": 0.96},
        {
            "SB top-k keep=0.33": [0.7, 0.75, 0.72],
            "random keep=0.33": [0.73, 0.77, 0.75],
            "batch 85, 4 epochs": [0.5] * 3,
        },
    )  # the ranges overlap, but random is slower in every repeat (paired differences 0.03, 0.02, 0.03): not tied
    assert said.startswith("Verdict: selection pays here: SB top-k keep=0.33 (time ratio 0.72, 0.70-0.75) reached")
    assert "ahead of every plain control" in said and "tied" not in said


def test_two_selection_arms_tied_are_both_named():
    kinds = {**KINDS, "SB + LossCache(2)": "selection"}
    from quickstart import Timing, verdict

    ratios = {"SB top-k keep=0.33": [0.7, 0.72, 0.74], "SB + LossCache(2)": [0.72, 0.71, 0.75]}
    ratios |= {"random keep=0.33": [0.9] * 3, "batch 85, 4 epochs": [0.95] * 3}
    accuracies = {"baseline": 0.97, **dict.fromkeys(ratios, 0.97)}
    said = verdict(accuracies, {n: Timing([], r) for n, r in ratios.items()}, kinds, tolerance=0.25)
    assert said.startswith(
        "Verdict: selection pays here: SB top-k keep=0.33 (time ratio 0.72, 0.70-0.74) and SB + LossCache(2)"
    )
    assert "tied within 2 standard errors of the 3 interleaved repeats" in said


@pytest.mark.slow
def test_the_fabric_example_resumes_mid_epoch_exactly(tmp_path):
    """examples/fabric_loop.py in one process: Fabric sets the loader up first, the SBLoader wraps it, and a checkpoint
    through fabric.save/fabric.load in the middle of the last epoch trains the rest of it on the same batches."""
    command = [sys.executable, str(ROOT / "examples" / "fabric_loop.py"), "--epochs", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "resumed mid-epoch exactly: True" in run.stdout
    assert [line.split(":")[0] for line in run.stdout.splitlines() if line.startswith("epoch ")] == [
        "epoch 0",
        "epoch 1",
    ]


EXTRAS = {  # each example's extra, as its --help names it
    "accelerate_loop": "accelerate", "costmodel": None, "custom_policy": "examples", "ddp": "examples",
    "fabric_loop": "lightning", "hf_trainer": "transformers", "lightning_ddp": "lightning", "mnist_loop": "examples",
    "quickstart": "examples", "torchdata_nodes": "torchdata,examples", "webdataset_stream": "webdataset,examples",
}  # fmt: skip
BLOCK_EXTRAS = """
import runpy, sys
for name in ("lightning", "pytorch_lightning", "lightning_fabric", "accelerate", "transformers", "torchdata",
             "webdataset", "mnist1d", "tqdm", "matplotlib"):
    sys.modules[name] = None  # as if no extra were installed
sys.argv = [sys.argv[1], "--help"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_every_example_is_listed():
    assert sorted(EXTRAS) == sorted(
        p.stem for p in (ROOT / "examples").glob("*.py") if p.stem not in ("__init__", "common")
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXTRAS))
def test_every_examples_help_works_without_its_extra_and_names_it(name):
    script = ROOT / "examples" / f"{name}.py"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'examples'}"}
    run = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS, str(script)], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: ")
    if EXTRAS[name] is not None:
        assert f'pip install -e ".[{EXTRAS[name]}]"' in run.stdout.replace("\n", " ")
