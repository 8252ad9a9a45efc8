"""The frontier benchmark (issue 30): its pricing, frontier and ratios on known answers, and its smoke runs end to
end (continued: pretrain, every arm, step timing, report; from scratch: the same without pretraining)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.frontier.data import SMOKE_SIZES, Sizes
from benchmarks.frontier.report import cheapest_reaching, limits, price, ratios, targets
from benchmarks.frontier.suites import SUITES

ROOT = Path(__file__).resolve().parents[2]

KINDS = {  # seconds per loader batch, a fixed table
    "plain b=64": 0.004,
    "plain b=256": 0.010,
    "prune b=256": 0.011,
    "topk keep=0.25 b=256": 0.005,
    "topk keep=0.5 b=256": 0.007,
    "warm-reused keep=0.25 b=256": 0.003,
    "warm-scored keep=0.25 b=256": 0.006,
    "warm-reused keep=0.5 b=256": 0.005,
    "warm-scored keep=0.5 b=256": 0.008,
}
TIMING = {name: {"seconds_per_batch": value} for name, value in KINDS.items()}


def config(batch=256, policy=None, keep=1.0, warm=False, prune=None):
    return {"batch": batch, "lr": 3e-3, "policy": policy, "keep": keep, "warm": warm, "prune": prune}


def test_price_every_kind_of_run():
    assert price({"config": config(64), "steps": 100, "epochs": 1}, TIMING, 6400) == pytest.approx(0.4)
    assert price({"config": config(prune=0.5), "steps": 10, "epochs": 1}, TIMING, 6400) == pytest.approx(0.11)
    fresh = {"config": config(policy="topk", keep=0.25), "steps": 10, "epochs": 1}
    assert price(fresh, TIMING, 6400) == pytest.approx(0.05)
    # a warm run that scored a third of what it saw: a third of the way from all-reused to all-scored
    warm = {"config": config(policy="topk", keep=0.5, warm=True), "steps": 30, "epochs": 1,
            "sb": {"samples_scored": 100, "samples_seen": 300}}  # fmt: skip
    assert price(warm, TIMING, 6400) == pytest.approx(30 * (0.005 + 0.003 / 3))
    # auto: the plain run of its batch and epochs (2 x 25 batches of 256) times auto's CPU seconds over the paired plain
    auto = {"config": config(policy="default", keep="auto"), "steps": 50, "epochs": 2, "cpu_seconds": 3.0,
            "paired_plain_cpu_seconds": 4.0}  # fmt: skip
    assert price(auto, TIMING, 6400) == pytest.approx(2 * 25 * 0.010 * 0.75)


def point(seconds, acc, epochs=1, batch=256):
    return {"seconds": seconds, "acc_mix": acc, "epochs": epochs, "batch": batch, "lr": 3e-3}


def test_ratios_read_both_envelopes_the_same_way():
    points = {
        "plain": [point(1.0, 0.80), point(2.0, 0.90, 2), point(4.0, 0.95, 4), point(3.0, 0.85, 3)],
        "sel": [point(0.5, 0.70), point(1.2, 0.91, 2), point(2.5, 0.93, 4)],
        "bad": [point(0.5, 0.60), point(5.0, 0.89, 4)],
    }
    out = ratios(points, [2.5, 4.0])
    low, high = out["2.500"], out["4.000"]
    assert low["target"] == 0.90 and low["frontier"]["seconds"] == 2.0  # 0.85 at 3 s costs more than 2.5 s
    assert low["families"]["sel"]["ratio"] == pytest.approx(1.2 / 2.0)
    assert low["families"]["sel"]["gap_within_pp"] == pytest.approx(3.0)  # 0.93 within 2.5 s against 0.90
    assert low["families"]["bad"]["ratio"] is None  # 0.89 never reaches 0.90
    assert low["families"]["plain"]["ratio"] == 1.0
    assert high["target"] == 0.95 and high["families"]["sel"]["ratio"] is None
    assert cheapest_reaching(points["sel"], 0.91)["seconds"] == 1.2


def test_targets_need_the_seed_mean_and_every_seed():
    row = {"target": 0.9, "families": {"warm-topk-0.25": {"ratio": 0.35}, "topk-0.25": {"ratio": 0.65},
                                       "auto": {"ratio": 0.70}}}  # fmt: skip
    seed_ok = {"target": 0.9, "families": {"warm-topk-0.25": {"ratio": 0.5}, "topk-0.25": {"ratio": 0.95}}}
    mean = {"1.000": row}
    per_seed = {0: {"1.000": seed_ok}, 1: {"1.000": seed_ok}}
    points = {"auto": [{"auto_on_share": 0.5}]}
    verdicts = targets(mean, per_seed, points, [1.0])
    assert verdicts[0].endswith("met") and "warm-topk-0.25 0.35x" in verdicts[0]
    assert verdicts[1].endswith("missed")  # fresh: 0.65x on the mean, but a seed at 0.95
    assert "auto" in verdicts[2] and verdicts[2].endswith("missed")  # 0.70 / 0.35 = 2x the best fixed


def test_limits_in_plain_epochs():
    out = limits(TIMING, Sizes())
    assert out["ideal"] == pytest.approx(3_000 / 15_000)
    assert out["fresh keep=0.25"] == pytest.approx(0.5)
    assert out["warm keep=0.25"] == pytest.approx((0.003 + 0.003 / 3) / 0.010)  # rescored one epoch in 3
    assert out["train_seconds_per_sample"] == pytest.approx(0.002 / 64)


def test_plan_grids_every_family_at_every_lr():
    arms = SUITES["continued"].plan(smoke=False)
    plain = [a for a, _ in arms if a.name == "plain"]
    lrs = (1e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2, 4.8e-2, 9.6e-2)  # the grid and its widening at the top
    assert {(a.batch, a.lr) for a in plain} == {(b, lr) for b in (64, 128, 256) for lr in lrs}
    wider = {"plain", *SUITES["continued"].wider_families}
    for name in {a.name for a, _ in arms}:
        assert {a.lr for a, _ in arms if a.name == name} == set(lrs if name in wider else lrs[:3]), name
    scratch = {a.name for a, _ in SUITES["scratch-mlp"].plan(smoke=False)}
    assert not any(name.startswith("warm") for name in scratch) and {"plain", "topk-0.25", "auto"} <= scratch


def smoke(suite: str, out: Path) -> list[dict]:
    """Every stage of ``suite`` in smoke mode into ``out``; its records, checked to be every planned run once."""
    pytest.importorskip("matplotlib")
    cmd = [sys.executable, "-m", "benchmarks", "frontier", "all", suite, "--smoke", "--out", str(out)]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=600, capture_output=True, text=True)  # a hang guard
    records = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    expected = {(arm.label, e) for arm, epochs in SUITES[suite].plan(smoke=True) for e in epochs}
    assert {(r["arm"], r["epochs"]) for r in records} == expected and len(records) == len(expected)
    return records


@pytest.mark.slow
def test_continued_smoke(tmp_path):
    records = smoke("continued", tmp_path)
    n = SMOKE_SIZES.mix
    for r in records:
        assert {"acc_mix", "acc_new", "acc_old"} <= set(r) and r["cpu_seconds"] > 0
        cfg = r["config"]
        if cfg["warm"] and cfg["prune"] is None and r["epochs"] == 1 and cfg["keep"] != "auto":
            # a warm run's first epoch scores the samples the pretraining never saw (every one of them), and of
            # the known ones only what pads a batch's scoring call to its bucket size
            assert r["sb"]["samples_seen"] == n
            assert n - SMOKE_SIZES.pretrain <= r["sb"]["samples_scored"] < n - SMOKE_SIZES.pretrain / 2
        if cfg["policy"] is not None and not cfg["warm"] and cfg["keep"] != "auto":
            assert r["sb"]["samples_scored"] == r["sb"]["samples_seen"] == r["epochs"] * n
        if cfg["keep"] == "auto":
            assert r["paired_plain_cpu_seconds"] > 0 and "on_share" in r["auto"]
        if cfg["policy"] is None and cfg["prune"] is None:
            assert r["steps"] == r["epochs"] * math.ceil(n / cfg["batch"])
    pretrained = json.loads((tmp_path / "pretrained.json").read_text())
    assert set(pretrained) == {"0"} and set(pretrained["0"]) == {"pretrained_acc_mix", "pretrained_acc_new",
                                                                 "pretrained_acc_old"}  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["budgets"]) == {"0.25", "0.5", "1.0"} and summary["targets"]
    table = (tmp_path / "table.md").read_text()
    assert "| plain |" in table and "## The limit" in table and "## Targets" in table
    assert (tmp_path / "accuracy_vs_seconds.png").stat().st_size > 0


@pytest.mark.slow
def test_scratch_smoke(tmp_path):
    records = smoke("scratch-mlp", tmp_path)
    assert all("acc_new" not in r and not r["config"]["warm"] for r in records)
    assert not (tmp_path / "pretrained").exists()
    table = (tmp_path / "table.md").read_text()
    assert "From scratch" in table and "selection at" in table


def test_noisy_scratch_flips_the_harness_pattern_of_training_labels_only():
    """The noisy suite's data: the harness's one flip pattern (the same as every other benchmark's noisy data), on the
    training labels alone; the inputs and the test set are those of the clean suite."""
    from benchmarks.frontier.data import scratch
    from benchmarks.harness.data import NOISE_SEED, flip_labels

    clean, noisy = scratch(2_000), scratch(2_000, noise=SUITES["scratch-noisy"].noise)
    expected, flipped = flip_labels(clean.y_train, 0.2, NOISE_SEED)
    assert noisy.y_train.equal(expected) and 0.15 < flipped.float().mean().item() < 0.25
    assert (noisy.y_train != clean.y_train).equal(flipped)  # a flipped label is always another class
    assert noisy.x_train.equal(clean.x_train) and noisy.y_test.equal(clean.y_test)


def test_suite_refuses_what_it_would_silently_ignore():
    from dataclasses import replace

    with pytest.raises(ValueError, match="noise= flips labels from scratch only"):
        replace(SUITES["continued"], noise=0.2)
    with pytest.raises(ValueError, match=r"wider_families names \['topk-0.3'\]"):
        replace(SUITES["scratch-cnn"], wider_families=("topk-0.3",))
