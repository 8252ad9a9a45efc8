"""The frontier benchmark (issue 30): its pricing, frontier and ratios on known answers, and its smoke runs end to
end (continued: pretrain, every arm, step timing, report; from scratch: the same without pretraining)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.frontier.arms import STALENESS
from benchmarks.frontier.data import SMOKE_SIZES, Sizes
from benchmarks.frontier.report import cheapest_reaching, ratios, targets
from benchmarks.frontier.suites import SUITES
from benchmarks.harness.cost import CHECK_EVERY, frontier_limits, frontier_run_seconds, price_table

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
    "topk-bf16 keep=0.25 b=256": 0.0045,
    "top_losses b=256": 0.0105,
    # the price table's parts, each timed alone
    "plain b=128": 0.006,
    "score b=256": 0.0015,
    "score-bf16 b=256": 0.001,
    "own: topk keep=0.25 b=256": 0.0003,
    "own: topk keep=0.5 b=256": 0.0003,
    "own: topk-bf16 keep=0.25 b=256": 0.0004,
    "own: warm-reused keep=0.25 b=256": 0.0004,
    "own: warm-scored keep=0.25 b=256": 0.0005,
    "own: top_losses b=256": 0.0002,
    "back to back: score b=256, train b=64": 0.0057,  # the two parts one after the other, no sbdata
}
TIMING = {name: {"seconds_per_batch": value} for name, value in KINDS.items()}


def config(batch=256, policy=None, keep=1.0, warm=False, prune=None, **more):
    return {"batch": batch, "lr": 3e-3, "policy": policy, "keep": keep, "warm": warm, "prune": prune, **more}


def test_price_every_kind_of_run():
    assert frontier_run_seconds({"config": config(64), "steps": 100, "epochs": 1}, TIMING, 6400) == pytest.approx(0.4)
    assert frontier_run_seconds({"config": config(prune=0.5), "steps": 10, "epochs": 1}, TIMING, 6400) == pytest.approx(
        0.11
    )
    fresh = {"config": config(policy="topk", keep=0.25), "steps": 10, "epochs": 1}
    assert frontier_run_seconds(fresh, TIMING, 6400) == pytest.approx(0.05)
    # a warm run that scored a third of what it saw: a third of the way from all-reused to all-scored
    warm = {"config": config(policy="topk", keep=0.5, warm=True), "steps": 30, "epochs": 1,
            "sb": {"samples_scored": 100, "samples_seen": 300}}  # fmt: skip
    assert frontier_run_seconds(warm, TIMING, 6400) == pytest.approx(30 * (0.005 + 0.003 / 3))
    # auto: the plain run of its batch and epochs (2 x 25 batches of 256) times auto's CPU seconds over the paired plain
    auto = {"config": config(policy="default", keep="auto"), "steps": 50, "epochs": 2, "cpu_seconds": 3.0,
            "paired_plain_cpu_seconds": 4.0}  # fmt: skip
    assert frontier_run_seconds(auto, TIMING, 6400) == pytest.approx(2 * 25 * 0.010 * 0.75)
    # bf16-scored top-k at its own kind; the free-scored sampler per batch it loaded at the top_losses kind
    bf16 = {"config": config(policy="topk", keep=0.25, autocast=True), "steps": 10, "epochs": 1}
    assert frontier_run_seconds(bf16, TIMING, 6400) == pytest.approx(0.045)
    sampler = {"config": config(prune=0.5, rule="top_losses"), "steps": 8, "epochs": 1}
    assert frontier_run_seconds(sampler, TIMING, 6400) == pytest.approx(8 * 0.0105)


def test_price_counts_the_reducible_arms_up_front_work():
    """The irreducible model's training steps at plain steps' seconds and its pass over the mix at the score kind's,
    on top of the selection steps."""
    kinds = {**TIMING, "reducible keep=0.25 b=256": {"seconds_per_batch": 0.006},
             "score b=256": {"seconds_per_batch": 0.002}}  # fmt: skip
    run = {"config": config(policy="reducible", keep=0.25), "steps": 10, "epochs": 1, "upfront_steps": 4,
           "upfront_scored": 600}  # fmt: skip
    assert frontier_run_seconds(run, kinds, 6400) == pytest.approx(10 * 0.006 + 4 * 0.010 + 3 * 0.002)


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
    assert low["families"]["sel"]["gap_within"] == pytest.approx(3.0)  # 0.93 within 2.5 s against 0.90
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


def test_price_table_sums_separately_timed_parts_never_the_step_itself():
    rows = {row["path"]: row for row in price_table(TIMING, 256)}
    fresh = rows["topk keep=0.25 b=256"]  # scoring at 256, training at the kept 64, sbdata's own work
    assert fresh["parts"] == {"score b=256": 0.0015, "train b=64": 0.004, "sbdata": 0.0003}
    assert fresh["limit"] == pytest.approx(0.0058) and fresh["over"] == pytest.approx(0.005 / 0.0058 - 1)
    assert fresh["limit_epochs"] == pytest.approx(0.58) and fresh["measured_epochs"] == pytest.approx(0.5)
    assert rows["topk keep=0.5 b=256"]["limit"] == pytest.approx(0.0015 + 0.006 + 0.0003)
    bf16 = rows["topk-bf16 keep=0.25 b=256"]  # bf16's pass plus the live check's full-precision one in 100
    assert bf16["limit"] == pytest.approx(0.001 + 0.0015 / CHECK_EVERY + 0.004 + 0.0004)
    assert rows["warm-reused keep=0.25 b=256"]["parts"] == {"train b=64": 0.004, "sbdata": 0.0004}  # nothing scored
    assert rows["warm-scored keep=0.25 b=256"]["limit"] == pytest.approx(0.0015 + 0.004 + 0.0005)
    assert rows["top_losses b=256"]["parts"] == {"train b=256": 0.010, "sbdata": 0.0002}
    # the scoring pass and the training step timed back to back (no sbdata): beside the limit, never in it
    assert fresh["back_to_back"] == pytest.approx(0.0057 + 0.0003)
    assert fresh["over_back_to_back"] == pytest.approx(0.005 / 0.006 - 1)
    assert bf16["back_to_back"] is None and rows["warm-reused keep=0.25 b=256"]["back_to_back"] is None  # not timed
    # a kind without its own-work part, or whose kept batch was not timed, has no limit: not made up
    assert "prune b=256" not in rows and "warm-scored keep=0.5 b=256" not in rows
    assert price_table({k: v for k, v in TIMING.items() if k != "plain b=256"}, 256) == []


def test_limits_in_plain_epochs():
    out = frontier_limits(TIMING, Sizes(), STALENESS)
    assert out["ideal"] == pytest.approx(3_000 / 15_000)
    assert out["topk keep=0.25 b=256"] == pytest.approx(0.58)
    reused, scored = (0.004 + 0.0004) / 0.010, (0.0015 + 0.004 + 0.0005) / 0.010
    assert out["warm keep=0.25"] == pytest.approx(reused + (scored - reused) / 3)  # rescored one epoch in 3
    assert not any("seconds_per_sample" in name for name in out)  # no residual "score" share


def test_targets_read_a_suites_own_bounds():
    """The compute-bound suite's pre-registered 0.7x on the seed mean with every seed below 0.85."""
    row = {"target": 0.9, "families": {"topk-0.25": {"ratio": 0.68}}}
    seeds = {s: {"1.000": {"target": 0.9, "families": {"topk-0.25": {"ratio": r}}}} for s, r in enumerate((0.6, 0.84))}
    met = targets({"1.000": row}, seeds, {}, [1.0], continued=False, bound=0.7, seed_bound=0.85)
    assert met == [met[0]] and met[0].endswith("met") and "target <= 0.7x" in met[0]
    seeds[1]["1.000"]["families"]["topk-0.25"]["ratio"] = 0.86
    assert targets({"1.000": row}, seeds, {}, [1.0], continued=False, bound=0.7, seed_bound=0.85)[0].endswith("missed")


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
def test_compute_bound_smoke(tmp_path):
    """The compute-bound suite's every family (bf16-scored and free-scored sampler top-k among them) end to end, and
    its price table from the timing's parts."""
    records = smoke("scratch-wide", tmp_path)
    names = {r["family_arm"] for r in records}
    assert {"topk-0.25-bf16", "sampler-topk-0.25", "random-0.25", "topk-0.5"} <= names
    n = 1_600  # the smoke's 2,000 samples, 80% training
    for r in records:
        if r["family_arm"] == "sampler-topk-0.25" and r["epochs"] == 2:  # epoch 1 loads all (no loss known yet);
            assert r["samples_loaded"][0] == n  # the last epoch anneals to full data
        if r["family_arm"] == "topk-0.25-bf16":
            assert r["sb"]["samples_scored"] == r["epochs"] * n
    timing = json.loads((tmp_path / "timing.json").read_text())
    assert timing["allocator"]["pinned"] in (True, False)
    assert {"score b=256", "score-bf16 b=256", "own: topk keep=0.25 b=256", "own: top_losses b=256"} <= set(
        timing["kinds"]
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {row["path"] for row in summary["prices"]} >= {"topk keep=0.25 b=256", "top_losses b=256"}
    assert "## The price table" in (tmp_path / "table.md").read_text()


@pytest.mark.slow
def test_scratch_smoke(tmp_path):
    records = smoke("scratch-mlp", tmp_path)
    assert all("acc_new" not in r and not r["config"]["warm"] for r in records)
    assert not (tmp_path / "pretrained").exists()
    table = (tmp_path / "table.md").read_text()
    assert "From scratch" in table and "selection at" in table


def test_back_to_back_check_smoke(tmp_path):
    """The back-to-back check times, for each fresh selection kind's (scoring batch, kept batch) pair, the parts
    apart and back to back on two models and on one; the smoke's pairs are top-k 0.25 and 0.5 at batch 256."""
    cmd = [sys.executable, "-m", "benchmarks", "frontier", "back-to-back", "scratch-mlp", "--smoke", "--out",
           str(tmp_path)]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, timeout=300)
    result = json.loads((tmp_path / "back-to-back.json").read_text())
    assert [(p["score_batch"], p["kept_batch"]) for p in result["pairs"]] == [(256, 64), (256, 128)]
    for pair in result["pairs"]:
        b, k = pair["score_batch"], pair["kept_batch"]
        ms = result["ms_per_batch"]
        assert pair["parts_ms"] == pytest.approx(ms[f"score b={b}"] + ms[f"plain b={k}"])
        assert {f"two models {b}/{k}", f"one model {b}/{k}"} <= set(ms)


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


# ------------------------------------------------------------------ the continued language-model suite
def test_nats_are_read_lower_is_better():
    """The LM suite's metric: the frontier is the lowest nats per byte within a budget, a family reaches it at or
    below it, and a gap is positive where the family is ahead (lower)."""
    from benchmarks.frontier.report import NATS

    def lm_point(seconds, nats, epochs=1):
        return {"seconds": seconds, "nats_mix": nats, "epochs": epochs, "batch": 16, "lr": 2e-3}

    points = {
        "plain": [lm_point(1.0, 2.0), lm_point(2.0, 1.8, 2), lm_point(3.0, 1.9, 3)],
        "sel": [lm_point(0.6, 2.1), lm_point(1.5, 1.75, 2)],
        "bad": [lm_point(0.5, 2.2), lm_point(2.5, 1.85, 4)],
    }
    out = ratios(points, [2.5], NATS)["2.500"]
    assert out["target"] == 1.8 and out["frontier"]["seconds"] == 2.0
    assert out["families"]["sel"]["ratio"] == pytest.approx(1.5 / 2.0)
    assert out["families"]["sel"]["gap_within"] == pytest.approx(0.05)  # 1.75 against 1.8: ahead
    assert out["families"]["bad"]["ratio"] is None and out["families"]["bad"]["gap_within"] == pytest.approx(-0.05)
    assert cheapest_reaching(points["sel"], 1.8, NATS)["seconds"] == 1.5


def test_lm_plan_narrows_the_controls_of_controls_and_skips_what_it_does_not_run():
    suite = SUITES["continued-lm"]
    arms = suite.plan(smoke=False)
    names = {a.name for a, _ in arms}
    assert "warm-auto" not in names and "warm-topk-0.25+prune" not in names
    assert {"plain", "topk-0.25", "warm-topk-0.5", "warm-prune", "random-0.25", "auto"} <= names
    lrs = (1e-3, 2e-3, 4e-3, 8e-3, 5e-4)  # the grid and its widening
    plain = {(a.batch, a.lr) for a, _ in arms if a.name == "plain"}
    assert plain == {(b, lr) for b in (4, 8, 16, 32) for lr in (*lrs, 1.6e-2)}  # plain alone also at 8x
    for name in suite.narrow_families:
        assert {(a.batch, a.lr) for a, _ in arms if a.name == name} == {(16, 2e-3)}, name
    assert {a.lr for a, _ in arms if a.name == "random-0.25"} == set(lrs)
    assert {a.lr for a, _ in arms if a.name == "warm-topk-0.25"} == set(lrs[:3])
    assert {a.batch for a, _ in arms if a.name == "topk-0.25"} == {16}  # no other fresh batch
    assert suite.recipe["batch"] == 16 and suite.domain == "lm"


def test_suite_refuses_a_domain_that_does_not_match_its_model():
    from dataclasses import replace

    with pytest.raises(ValueError, match="domain='lm' with family='bytelm'"):
        replace(SUITES["continued-lm"], domain="mnist1d")
    with pytest.raises(ValueError, match=r"narrow_families names \['rank-0.5'\]"):
        replace(SUITES["continued-lm"], narrow_families=("rank-0.5",))


def test_lm_mix_is_replay_fresh_code_and_docs_with_held_out_tests():
    """The mix's first chunks are the pretraining's very chunks (the warm cache's id map says so and drops the rest),
    the fresh code was never pretrained on, the new chunks are documentation text, and no test chunk trains."""
    from benchmarks.frontier.lm import SMOKE_LM_SIZES, lm_mix

    s = SMOKE_LM_SIZES
    data = lm_mix(s)
    assert data.chunks.shape == (s.mix, 128) and data.chunks[: s.replay].equal(data.pre[: s.replay])
    id_map = data.id_map()
    assert id_map[: s.replay].equal(torch.arange(s.replay)) and bool((id_map[s.replay :] == -1).all())
    rows = {bytes(row.tolist()) for row in data.pre}
    assert not any(bytes(row.tolist()) in rows for row in data.chunks[s.replay : s.replay + s.fresh])
    trained = {bytes(row.tolist()) for row in data.chunks} | rows
    tests = torch.cat([data.test_old, data.test_new])
    assert not any(bytes(row.tolist()) in trained for row in tests)
    assert len(data.test_mix) == s.test_old + s.test_mix_new and data.test_mix[: s.test_old].equal(data.test_old)
    prose = data.chunks[s.replay + s.fresh :]  # the documentation: mostly letters and spaces, few code symbols
    letters = sum(chr(b).isalpha() or chr(b) == " " for b in prose.flatten().tolist()) / prose.numel()
    assert letters > 0.75


@pytest.mark.slow
def test_continued_lm_smoke(tmp_path):
    from benchmarks.frontier.lm import SMOKE_LM_SIZES

    records = smoke("continued-lm", tmp_path)
    n, s = SMOKE_LM_SIZES.mix, SMOKE_LM_SIZES
    for r in records:
        assert {"nats_mix", "nats_new", "nats_old"} <= set(r) and r["cpu_seconds"] > 0
        cfg = r["config"]
        if cfg["warm"] and cfg["prune"] is None and r["epochs"] == 1 and cfg["policy"] is not None:
            # the first epoch scores what the pretraining never saw, and of the replayed chunks only what pads a
            # scoring call to its bucket size
            assert r["sb"]["samples_seen"] == n
            assert n - s.replay <= r["sb"]["samples_scored"] < n - s.replay / 2
        if cfg["policy"] is None and cfg["prune"] is None:
            assert r["steps"] == r["epochs"] * math.ceil(n / cfg["batch"])
    table = (tmp_path / "table.md").read_text()
    assert "nats per byte" in table and "| warm-topk-0.5 |" in table and "## Targets" in table
    assert (tmp_path / "nats_vs_seconds.png").stat().st_size > 0
    # advise's branch trial through the causal-LM hooks, priced by the fixed cost table
    for stage in ("trial", "trial-report"):
        cmd = [sys.executable, "-m", "benchmarks", "frontier", stage, "continued-lm", "--smoke", "--out", str(tmp_path)]
        subprocess.run(cmd, cwd=ROOT, check=True, timeout=600, capture_output=True, text=True)
    (trial,) = [json.loads(line) for line in (tmp_path / "trial" / "runs.jsonl").read_text().splitlines()]
    assert trial["trial_steps"] == 16 and trial["fixed_costs"] and trial["at_epochs"] == 1
    options = [row["option"] for row in trial["trial"]]
    assert options[0] == "no selection" and "top-k keep=0.25" in options and "smaller batch 8" in options
    plain = trial["trial"][0]
    assert plain["seconds"] == 16 * 3 * 16 and plain["start"] < 0  # priced: 16 steps of 16 trained; minus nats
    assert "| named |" in (tmp_path / "trial" / "table.md").read_text()


def test_the_trial_stages_are_the_language_models():
    cmd = [sys.executable, "-m", "benchmarks", "frontier", "trial", "continued", "--smoke"]
    done = subprocess.run(cmd, cwd=ROOT, timeout=600, capture_output=True, text=True)
    assert done.returncode == 2 and "python -m benchmarks calibration trial" in done.stderr
