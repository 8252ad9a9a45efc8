"""The micro recipe (``benchmarks/recipes/micro.py``): its pure pieces on known answers, the batch-statistics scoring
mode's lack of side effects, and every stage's smoke run end to end, checked for structure and arithmetic (never for
a measured time)."""

import copy
import importlib.util
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from benchmarks.domains import domain
from benchmarks.domains.digits import cnn as digits_cnn
from benchmarks.domains.mnist1d import ConvNet
from benchmarks.lab.run import scoring_pass
from benchmarks.recipes.micro import gpu_measure, kept, overlap, ranks, spearman, training_losses

ROOT = Path(__file__).resolve().parents[2]


def test_kept_takes_ceil_keep_n_ties_to_the_lower_index():
    assert kept(torch.tensor([1.0, 3.0, 3.0, 0.0]), 0.5).tolist() == [1, 2]  # the tie: both 3s, lower index first
    assert kept(torch.tensor([3.0, 1.0, 3.0, 0.0]), 0.25).tolist() == [0]  # ceil(1.0): one, the tie to index 0
    assert len(kept(torch.arange(10.0), 0.3)) == 3  # 0.3 * 10 is 3.0000000000000004 in floats: still 3
    assert len(kept(torch.arange(4.0), 0.01)) == 1  # at least one


def test_overlap_counts_the_shared_kept_samples():
    a = torch.tensor([4.0, 3.0, 2.0, 1.0])
    assert overlap(a, torch.tensor([1.0, 2.0, 3.0, 4.0]), 0.5) == 0.0  # reversed: {0, 1} against {2, 3}
    assert overlap(a, torch.tensor([4.0, 3.0, 1.0, 2.0]), 0.5) == 1.0  # only the unkept pair swapped
    eight = torch.arange(8.0, 0.0, -1.0)
    swapped = torch.tensor([8.0, 1.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0])  # sample 1 falls out of the top 2
    assert overlap(eight, swapped, 0.25) == 0.5


def test_ranks_average_ties():
    assert ranks(torch.tensor([10.0, 20.0, 20.0, 5.0])).tolist() == [1.0, 2.5, 2.5, 0.0]


def test_spearman_on_planted_vectors():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    assert spearman(x, torch.tensor([2.0, 1.0, 4.0, 3.0, 5.0])) == pytest.approx(0.8)  # 1 - 6 * 4 / (5 * 24)
    assert spearman(x, x.exp()) == pytest.approx(1.0)  # any increasing map
    assert spearman(x, -x) == pytest.approx(-1.0)
    # a tie: ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4): 4.5 / sqrt(5 * 4.5)
    assert spearman(x[:4], torch.tensor([1.0, 2.0, 2.0, 3.0])) == pytest.approx(3 / math.sqrt(10))


def batch_of(shape, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *shape, generator=g) * 3 + 1, torch.randint(0, 10, (n,), generator=g)


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}, [m.training for m in model.modules()]


@pytest.mark.parametrize("make, shape", [(ConvNet, (1, 40)), (digits_cnn, (1, 8, 8))])
def test_batch_statistics_scoring_changes_nothing(make, shape):
    dom = domain("mnist1d")  # its loss is cross-entropy on (x, y), as every classification domain's
    torch.manual_seed(0)
    model = make()
    model.train()
    model(batch_of(shape, seed=1)[0])  # running statistics away from their initial values
    next(m for m in model.modules() if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d)).eval()  # mixed modes
    before, modes = snapshot(model)
    rng = torch.get_rng_state()
    batch = batch_of(shape)
    losses = scoring_pass(dom, "batch")(model, batch)
    training_losses(dom, model, batch, 0)
    after, modes_after = snapshot(model)
    assert modes_after == modes
    assert all(torch.equal(before[k], after[k]) for k in before), "a parameter or buffer moved"
    assert torch.equal(torch.get_rng_state(), rng)
    # the known answer: the train-mode forward with dropout off, on a copy (batch statistics, nothing frozen)
    twin = copy.deepcopy(model).train()
    for m in twin.modules():
        if isinstance(m, nn.Dropout):
            m.eval()
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(twin(batch[0]), batch[1], reduction="none")
    assert torch.allclose(losses, expected, atol=1e-6)
    assert not torch.allclose(losses, scoring_pass(dom, "eval")(model, batch), atol=1e-3)  # the running statistics


def smoke(stage, tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks", "micro", stage, "--smoke", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    folder = tmp_path / stage
    assert json.loads((folder / "machine.json").read_text())["torch_threads"] == 1
    assert (folder / "table.md").read_text().startswith("# ")
    return json.loads((folder / "summary.json").read_text())


def check_rounds(arms, base):
    for row in arms.values():
        assert row["ratios"] == [t / b for t, b in zip(row["seconds"], arms[base]["seconds"], strict=True)]
        assert row["ratio"]["median"] == statistics.median(row["ratios"])
        assert row["median_ms"] == pytest.approx(1e3 * statistics.median(row["seconds"]))
    assert set(arms[base]["ratios"]) == {1.0}


def installed(name):
    return importlib.util.find_spec(name) is not None


@pytest.mark.slow
def test_overhead_smoke(tmp_path):
    summary = smoke("overhead", tmp_path)
    assert list(summary["models"]) == ["one-layer", "cnn", "cnn-wide"]
    for model in summary["models"].values():
        arms, skipped = model["arms"], model["skipped"]
        check_rounds(arms, "hand-written")
        assert {row["trained_per_step"] for row in arms.values()} == {math.ceil(0.33 * 64)}  # every arm trains 22
        assert "wds.sb_select" in arms  # the stage is a plain generator: it needs no webdataset
        assert "nodes.SBSelector" in arms if installed("torchdata") else "torchdata" in skipped["nodes.SBSelector"]


@pytest.mark.slow
def test_auto_off_smoke(tmp_path):
    summary = smoke("auto-off", tmp_path)
    check_rounds(summary["arms"], "plain loop")
    assert 'keep="auto", run not told' in summary["arms"] and summary["target"] == 1.02
    for name, row in summary["arms"].items():
        if name != "plain loop":
            assert row["trials"] == 0 and row["samples_scored"] == 0  # the smoke's few steps: no trial started


@pytest.mark.slow
def test_scoring_smoke(tmp_path):
    summary = smoke("scoring", tmp_path)
    suites, skipped = summary["suites"], summary["skipped"]
    assert set(suites) | set(skipped) == {"mnist1d-cnn", "mnist1d-cnn64", "mnist1d-mlp", "digits-cnn", "fashion-cnn",
                                          "bytelm"}  # fmt: skip
    assert set(skipped) <= {"fashion-cnn"} and all("Fashion-MNIST" in why for why in skipped.values())
    for name, s in suites.items():
        assert s["points"][0]["at"] == 0.0 and s["points"][1]["at"] == pytest.approx(2 / s["steps"])
        moded = name in ("mnist1d-cnn", "mnist1d-cnn64", "digits-cnn")  # running statistics or dropout
        assert set(s["cost_ms_per_batch"]) == {"eval", "eval bf16", *(["batch-stats"] if moded else [])}
        for p in s["points"]:
            for keep in ("0.25", "0.5"):
                k = math.ceil(float(keep) * s["batch"])
                assert 0 <= p["bf16"][keep]["lowest"] <= p["bf16"][keep]["mean"] <= 1
                assert (p["bf16"][keep]["lowest"] * k) == pytest.approx(round(p["bf16"][keep]["lowest"] * k))
            assert ("eval" in p) == ("batch-stats" in p) == moded
    for p in suites["mnist1d-cnn"]["points"]:  # no dropout: batch statistics are the training forward's losses
        assert p["batch-stats"]["0.25"]["lowest"] == 1.0 and p["batch-stats"]["spearman"] == pytest.approx(1.0)


@pytest.mark.slow
def test_cache_smoke(tmp_path):
    summary = smoke("cache", tmp_path)
    runs = [json.loads(line) for line in (tmp_path / "cache" / "runs.jsonl").read_text().splitlines()]
    by = {r["arm"]: r for r in runs}
    assert set(by) == set(summary["arms"]) == {"fresh", "cache-s2", "cache-s2-observe", "cache-s2-observe-scored"}
    for name, row in summary["arms"].items():
        assert row["x_fresh"]["median"] == by[name]["cpu_seconds"] / by["fresh"]["cpu_seconds"]
        assert row["scored_x_fresh"] == by[name]["sb"]["samples_scored"] / by["fresh"]["sb"]["samples_scored"]
    # staleness 2 over 4 epochs: each sample is scored in epochs 0 and 3, half of what fresh scoring scores
    assert summary["arms"]["cache-s2"]["scored_x_fresh"] == 0.5
    assert "x_no_observe" in summary["arms"]["cache-s2-observe"] and "x_no_observe" not in summary["arms"]["fresh"]


@pytest.mark.slow
def test_streaming_smoke(tmp_path):
    if not installed("webdataset"):
        pytest.skip("webdataset is not installed: the streaming stage needs it")
    summary = smoke("streaming", tmp_path)
    assert summary["pipeline"]["yielded"] == summary["memory"]["samples_seen"] == 4096
    assert summary["with_stage"]["yielded"] == summary["memory"]["samples_yielded"] == 16 * 128  # keep 0.5 of 256
    m = summary["memory"]
    assert m["growth_mib"] == m["last_mib"] - m["first_mib"] and m["max_mib"] >= m["last_mib"]


@pytest.mark.slow
def test_gpu_stage(tmp_path):
    if not torch.cuda.is_available():
        done = subprocess.run([sys.executable, "-m", "benchmarks", "micro", "gpu", "--smoke", "--out", str(tmp_path)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode != 0 and "no CUDA device" in done.stderr
        summary, _ = gpu_measure(torch.device("cpu"), smoke=True)  # its timing on the CPU; the sync check says why not
        assert "no CUDA device" in summary["sync_check"]["all"]
    else:
        summary = smoke("gpu", tmp_path)
        assert set(summary["sync_check"].values()) == {"ok"}, summary["sync_check"]
    arms = summary["timing"]["8/64"]
    assert list(arms) == ["plain", "small-batch", "sb-topk", "sb-cache-observe"] and arms["plain"]["x_plain"] == 1.0
