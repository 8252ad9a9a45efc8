"""The lab's arithmetic on known answers: pricing a run from a timing, the price table's limit (the parts back to back
on one model plus sbdata's own work), reading a frontier at a budget, and the resumable run loop."""

import json
import math

import pytest
import torch

from benchmarks.domains import domain
from benchmarks.lab.arm import Arm
from benchmarks.lab.domain import ACCURACY, NATS
from benchmarks.lab.loop import Job, run_loop, worker
from benchmarks.lab.price import CHECK_EVERY, back_to_back_name, limits, price_table, run_seconds
from benchmarks.lab.read import configurations, envelope, per_seed, reach, read_at, value_at

TIMING = {
    name: {"seconds_per_batch": value}
    for name, value in {
        "plain b=64": 0.004,
        "plain b=256": 0.010,
        "plain b=128": 0.006,
        "topk keep=0.25 b=256": 0.0060,
        "topk keep=0.5 b=256": 0.0080,
        "topk-bf16 keep=0.25 b=256": 0.0055,
        "top_losses b=256": 0.0105,
        "warm-reused keep=0.25 b=256": 0.0045,
        "warm-scored keep=0.25 b=256": 0.0062,
        "prune b=256": 0.011,
        "score b=256": 0.0015,
        "score-bf16 b=256": 0.0010,
        back_to_back_name("score", 256, 64): 0.0059,
        back_to_back_name("score", 256, 128): 0.0078,
        back_to_back_name("score-bf16", 256, 64): 0.0052,
        "own: topk keep=0.25 b=256": 0.0003,
        "own: topk keep=0.5 b=256": 0.0003,
        "own: topk-bf16 keep=0.25 b=256": 0.0004,
        "own: top_losses b=256": 0.0002,
        "own: warm-reused keep=0.25 b=256": 0.0004,
        "own: warm-scored keep=0.25 b=256": 0.0005,
    }.items()
}


def config(batch=256, policy=None, keep=1.0, prune=None, warm=False, autocast=False, rule="infobatch"):
    return {"batch": batch, "policy": policy, "keep": keep, "prune": prune, "warm": warm, "autocast": autocast,
            "rule": rule}  # fmt: skip


def test_a_run_is_priced_at_its_step_kind():
    assert run_seconds({"config": config(64), "steps": 100, "epochs": 1}, TIMING, 6400) == pytest.approx(0.4)
    assert run_seconds({"config": config(prune=0.5), "steps": 10, "epochs": 1}, TIMING, 6400) == pytest.approx(0.11)
    sampler = {"config": config(prune=0.5, rule="top_losses"), "steps": 8, "epochs": 1}
    assert run_seconds(sampler, TIMING, 6400) == pytest.approx(8 * 0.0105)
    fresh = {"config": config(policy="topk", keep=0.25), "steps": 10, "epochs": 1}
    assert run_seconds(fresh, TIMING, 6400) == pytest.approx(0.06)
    bf16 = {"config": config(policy="topk", keep=0.25, autocast=True), "steps": 10, "epochs": 1}
    assert run_seconds(bf16, TIMING, 6400) == pytest.approx(0.055)
    # a warm run that scored a third of what it saw: a third of the way from all-reused to all-scored
    warm = {"config": config(policy="topk", keep=0.25, warm=True), "steps": 30, "epochs": 1,
            "sb": {"samples_scored": 100, "samples_seen": 300}}  # fmt: skip
    assert run_seconds(warm, TIMING, 6400) == pytest.approx(30 * (0.0045 + 0.0017 / 3))
    # keep="auto": the plain run of its batch and epochs (2 x 25 batches of 256) times its CPU seconds over the pair's
    auto = {"config": config(policy="default", keep="auto"), "steps": 50, "epochs": 2, "cpu_seconds": 3.0,
            "paired_plain_cpu_seconds": 4.0}  # fmt: skip
    assert run_seconds(auto, TIMING, 6400) == pytest.approx(2 * 25 * 0.010 * 0.75)
    # the reducible arm's up-front work: its training steps at plain steps', its pass over the set at the score kind's
    reducible = {"config": config(policy="topk", keep=0.25), "steps": 10, "epochs": 1, "upfront_steps": 5,
                 "upfront_scored": 1000}  # fmt: skip
    assert run_seconds(reducible, TIMING, 6400) == pytest.approx(0.06 + 5 * 0.010 + 4 * 0.0015)


def test_the_limit_is_the_parts_back_to_back_plus_sbdata_never_the_step_itself():
    rows = {row["path"]: row for row in price_table(TIMING, 256)}
    fresh = rows["topk keep=0.25 b=256"]
    assert fresh["parts"] == {"score b=256, then train b=64": 0.0059, "sbdata": 0.0003}
    assert fresh["limit"] == pytest.approx(0.0062) and fresh["over"] == pytest.approx(0.006 / 0.0062 - 1)
    # the same parts timed apart stay beside as a column
    assert fresh["apart"] == pytest.approx(0.0015 + 0.004 + 0.0003)
    assert fresh["over_apart"] == pytest.approx(0.006 / 0.0058 - 1)
    assert fresh["limit_epochs"] == pytest.approx(0.62) and fresh["measured_epochs"] == pytest.approx(0.6)
    bf16 = rows["topk-bf16 keep=0.25 b=256"]  # bf16's pair plus the live check's full-precision pass in CHECK_EVERY
    assert bf16["limit"] == pytest.approx(0.0052 + 0.0015 / CHECK_EVERY + 0.0004)
    assert rows["warm-reused keep=0.25 b=256"]["parts"] == {"train b=64": 0.004, "sbdata": 0.0004}  # nothing scored
    assert rows["top_losses b=256"]["parts"] == {"train b=256": 0.010, "sbdata": 0.0002}
    # a path whose parts were not timed has no limit (warm-scored's pair at 64 was timed; prune has no own work)
    assert rows["warm-scored keep=0.25 b=256"]["limit"] == pytest.approx(0.0059 + 0.0005)
    assert "prune b=256" not in rows
    assert price_table({k: v for k, v in TIMING.items() if k != "plain b=256"}, 256) == []
    missing_pair = {k: v for k, v in TIMING.items() if k != back_to_back_name("score", 256, 128)}
    assert "topk keep=0.5 b=256" not in {row["path"] for row in price_table(missing_pair, 256)}


def test_limits_in_plain_epochs():
    out = limits(TIMING, 256, staleness=2, new_share=0.2)
    assert out["ideal"] == 0.2
    assert out["topk keep=0.25 b=256"] == pytest.approx(0.62)
    reused, scored = 0.0044 / 0.010, 0.0064 / 0.010
    assert out["warm keep=0.25"] == pytest.approx(reused + (scored - reused) / 3)  # rescored one epoch in 3
    assert out["warm keep=0.25, nothing scored"] == pytest.approx(reused)
    assert "ideal" not in limits(TIMING, 256, staleness=2, new_share=None)


def point(seconds, acc, epochs=1, batch=256, lr=1e-3):
    return {"seconds": seconds, "acc_mix": acc, "epochs": epochs, "batch": batch, "lr": lr}


def test_the_envelope_interpolates_and_reaches():
    curve = envelope([point(1.0, 0.80), point(2.0, 0.90), point(3.0, 0.85), point(4.0, 0.95)], ACCURACY)
    assert curve == [(1.0, 0.80), (2.0, 0.90), (4.0, 0.95)]  # 0.85 at 3 s is below what 2 s reaches
    assert value_at(curve, 3.0) == pytest.approx(0.925) and value_at(curve, 0.5) is None
    assert value_at(curve, 9.0) == 0.95  # its last value beyond it
    assert reach(curve, 0.85) == pytest.approx(1.5) and reach(curve, 0.7) == 1.0 and reach(curve, 0.99) is None
    # nats: lower is better, read through the sign
    nats = envelope([{"seconds": 1.0, "nats_mix": 2.0}, {"seconds": 2.0, "nats_mix": 1.5}], NATS)
    assert nats == [(1.0, -2.0), (2.0, -1.5)]


def test_a_family_is_read_at_the_frontiers_value_at_the_budget():
    points = {
        "plain": [point(1.0, 0.80), point(2.0, 0.90, 2), point(4.0, 0.95, 4)],
        "sel": [point(0.5, 0.70), point(1.2, 0.91, 2), point(2.5, 0.93, 4)],
        "bad": [point(0.5, 0.60), point(5.0, 0.89, 4)],
    }
    low, high, early = read_at(points, [2.0, 3.0, 0.5], ACCURACY)
    assert low["target"] == pytest.approx(0.90) and low["base"] == pytest.approx(2.0)
    assert low["ratios"]["sel"] == pytest.approx((0.5 + 0.7 * (0.20 / 0.21)) / 2.0)  # along 0.70 -> 0.91
    assert low["ratios"]["bad"] is None and low["ratios"]["plain"] == pytest.approx(1.0)
    assert high["target"] == pytest.approx(0.925) and high["ratios"]["sel"] == pytest.approx((1.2 + 1.3 * 0.75) / 3)
    assert early is None  # no plain configuration fits half a second


def test_configurations_average_seeds_and_per_seed_reads_each_alone():
    def record(seed, acc, seconds):
        return {"family_arm": "plain", "config": {"batch": 256, "lr": 1e-3}, "epochs": 1, "seed": seed,
                "seconds": seconds, "acc_mix": acc}  # fmt: skip

    records = [record(0, 0.8, 1.0), record(1, 0.9, 3.0)]
    (p,) = configurations(records, ACCURACY)["plain"]
    assert p["acc_mix"] == pytest.approx(0.85) and p["seconds"] == pytest.approx(2.0) and p["seeds"] == 2
    seeds = per_seed(records, [3.0], ACCURACY)
    assert seeds[0][0]["target"] == pytest.approx(0.8) and seeds[1][0]["target"] == pytest.approx(0.9)


def test_the_run_loop_resumes_and_splits_among_workers(tmp_path):
    path = tmp_path / "runs.jsonl"
    ran = []

    def job(i):
        return Job(i, lambda: ran.append(i) or {"i": i})

    run_loop([job(i) for i in range(6)], path, lambda r: r["i"], worker=(1, 2))
    assert ran == [1, 3, 5]
    records = run_loop([job(i) for i in range(6)], path, lambda r: r["i"])  # the rest; nothing twice
    assert ran == [1, 3, 5, 0, 2, 4] and sorted(r["i"] for r in records) == list(range(6))
    assert [json.loads(line)["i"] for line in path.read_text().splitlines()] == [1, 3, 5, 0, 2, 4]
    assert worker("1/3") == (1, 3)
    with pytest.raises(ValueError, match="0 <= I < N"):
        worker("3/3")


def test_an_arm_builds_sbdata_with_its_options():
    dom = domain("digits")
    data = dom.data(smoke=True)
    model = dom.tiny()
    arm = Arm("topk-0.25", batch=64, lr=1e-3, policy="topk", keep=0.25, score_mode="eval")
    built = arm.build(dom, "cnn", model, data, epochs=1, seed=0)
    batches = list(built.batches)
    assert len(batches) == math.ceil(data.size / 64)
    assert all(len(b[1]) == math.ceil(0.25 * len(s[1])) for b, s in zip(batches, built.source, strict=False))
    assert arm.kept == 16 and Arm("plain", batch=64).kept == 64
    with pytest.raises(ValueError, match="pretrained"):
        Arm("warm", policy="topk", keep=0.25, warm=True).build(dom, "cnn", model, data, epochs=1, seed=0)
    assert torch.is_tensor(batches[0][0])


def test_the_reports_memory_layout_reads_the_convolutions_not_an_ambiguous_first_layer():
    from torch import nn

    from benchmarks.recipes.frontier_report import _layout

    def cnn():  # the first weight has one input channel: it is contiguous in both layouts
        return nn.Sequential(nn.Conv2d(1, 4, 3), nn.Conv2d(4, 8, 3))

    assert _layout(cnn().to(memory_format=torch.channels_last)) == "channels-last"
    assert _layout(cnn()) == "contiguous (torch's default)"
    assert _layout(nn.Sequential(nn.Conv1d(1, 4, 3), nn.Linear(4, 2))) == "no 2-d convolution"
