"""The language-model benchmark: its data split, its report's arithmetic, and its smoke mode end to end."""

import json
import math
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

from benchmarks.harness.lm import ByteLM, chunks_of, load_corpus, stdlib_files, validation_loss, zlib_ratios
from benchmarks.harness.lm_arms import LMArm, SequenceBatches, sequence_losses
from benchmarks.harness.lm_suite import tuned, widened
from benchmarks.harness.stats import at_cost
from benchmarks.lm.report import gap, reach

ROOT = Path(__file__).resolve().parents[2]


def test_chunks_concatenate_files_and_drop_the_tail(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_bytes(b"abcde")
    b.write_bytes(b"xyz")
    chunks = chunks_of([a, b], context=4)  # b"abcde\nxyz" -> "abcd", "e\nxy"; "z" dropped
    assert chunks.tolist() == [list(b"abcd"), list(b"e\nxy")]


def test_zlib_ratio_separates_text_from_noise():
    text = torch.tensor([list(b"ab" * 64)], dtype=torch.uint8)
    noise = torch.randint(0, 256, (1, 128), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    ratios = zlib_ratios(torch.cat([text, noise]))
    assert ratios[0] == pytest.approx(len(zlib.compress(b"ab" * 64, 9)) / 128)
    assert ratios[0] < 0.2 < 1.0 < ratios[1]


def test_corpus_splits_by_file_and_flags_the_top_tenth():
    files = stdlib_files()
    assert files == sorted(files) and not any("site-packages" in str(p) for p in files)
    corpus = load_corpus(validation=64)
    assert corpus.description["files"]["validation"] == len(files[0::20])
    assert corpus.description["files"]["holdout"] == len(files[10::20])
    assert len(corpus.validation) == 64 and corpus.train.dtype == torch.uint8
    assert corpus.noisy.sum().item() == round(0.1 * len(corpus.train))
    assert bool((corpus.ratios[corpus.noisy] >= corpus.threshold).all())
    assert bool((corpus.ratios[~corpus.noisy] <= corpus.threshold).all())
    assert torch.equal(corpus.subset(16), corpus.subset(16))  # the repeating regime's set is fixed


def test_validation_loss_of_an_untrained_model_is_near_uniform():
    torch.manual_seed(0)
    chunks = torch.randint(0, 256, (8, 32), dtype=torch.uint8)
    model = ByteLM(width=32, layers=1, heads=2, context=32)
    model.train()
    loss = validation_loss(model, chunks)
    assert abs(loss - math.log(256)) < 0.3 and model.training  # mode restored


def test_sequence_batches_order_depends_only_on_seed_and_epoch():
    chunks = torch.arange(20 * 4, dtype=torch.uint8).view(20, 4)
    small = [b["ids"] for b in SequenceBatches(chunks, 3, seed=5)]
    large = [b["ids"] for b in SequenceBatches(chunks, 7, seed=5)]
    assert torch.equal(torch.cat(small), torch.cat(large))
    source = SequenceBatches(chunks, 7, seed=5)
    source.set_epoch(1)
    assert not torch.equal(torch.cat([b["ids"] for b in source]), torch.cat(small))
    batch = next(iter(source))
    assert batch["input_ids"].dtype == torch.long and torch.equal(batch["input_ids"], chunks[batch["ids"]].long())


def test_sequence_losses_match_the_mean_next_byte_loss():
    torch.manual_seed(0)
    model = ByteLM(width=32, layers=1, heads=2, context=16)
    ids = torch.randint(0, 256, (3, 16))
    losses = sequence_losses(model, {"input_ids": ids, "ids": torch.arange(3)})
    logits = model(ids)[:, :-1]
    expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(1)
    torch.testing.assert_close(losses, expected)


@pytest.mark.parametrize("layout, sizes", [("fixed", [4, 4, 4, 4]), ("shrink", [1] * 16)])
def test_selection_layouts_yield_the_tuned_batch_or_keep_of_it(layout, sizes):
    torch.manual_seed(0)
    model = ByteLM(width=32, layers=1, heads=2, context=8)
    chunks = torch.randint(0, 256, (64, 8), dtype=torch.uint8)
    loader, source, observer = LMArm("t", "topk", 0.25, layout).build(model, chunks, batch=4, seed=0, epochs=1)
    assert source.batch_size == 4 and observer is None
    assert [len(b["ids"]) for b in loader] == sizes
    assert loader.stats.samples_scored == 64  # every sequence scored once, whatever the layout


def curve(*points):
    return {"curve": [{"fe": x, "seconds": x / 10, "val_loss": y} for x, y in points]}


def test_interpolation_gap_and_reach_known_answers():
    assert at_cost([(0, 5.0), (10, 3.0)], 5) == pytest.approx(4.0)  # the report reads a loss curve with it too
    assert at_cost([(0, 5.0), (10, 3.0)], 11) is None
    slow, fast = curve((0, 5.0), (10, 3.0)), curve((0, 5.0), (8, 2.0))
    assert gap(slow, fast, "fe") == pytest.approx(3.4 - 2.0)  # both read at fe=8, the smaller final
    assert reach(fast, 3.0, "fe") == pytest.approx(16 / 3)  # 5 -> 2 over 8: 3.0 at 2/3 of the way
    assert reach(slow, 2.5, "fe") is None
    # a curve that ends exactly on the target reaches it at its last point, not one ulp before (0.2 + 0.7 != 0.9)
    assert reach(curve((2, 5.0), (9, 3.0)), 3.0, "seconds") == 0.9


def test_tuning_grid_widens_only_past_the_edge_holding_the_best():
    rows = [
        {"regime": "r", "config": {"batch": b, "lr": lr}, "val_loss": loss, "fe": 30.0}
        for (b, lr), loss in {(4, 1e-3): 2.0, (8, 1e-3): 1.9, (4, 2e-3): 1.8, (8, 2e-3): 1.95}.items()
    ]
    best = tuned(rows, "r")
    assert (best["batch"], best["lr"]) == (4, 2e-3)
    assert widened(best) == ((2, 4, 8), (1e-3, 2e-3, 4e-3))
    inside = {"batch": 8, "lr": 2e-3, "batches": [4, 8, 16], "lrs": [1e-3, 2e-3, 4e-3]}
    assert widened(inside) is None


@pytest.mark.slow
def test_lm_benchmark_smoke(tmp_path):
    cmd = [sys.executable, "-m", "benchmarks", "lm", "all", "--smoke", "--jobs", "1", "--out", str(tmp_path)]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=600, capture_output=True, text=True)
    out = tmp_path / "main"
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert {r["regime"] for r in runs} == {"single-pass", "repeating"}
    assert {"prune-infobatch", "cache-s2-observe-0.5-shrink"} <= {r["arm"] for r in runs if r["regime"] == "repeating"}
    for r in runs:
        assert 0 <= r["noisy_share"] <= 1 and r["trained_tokens_per_second"] > 0
        if not r["arm"].startswith(("prune", "reducible")):  # FE-metered: spends its budget, at most a step over
            step_fe = 4 * r["config"]["batch"]  # the most one step spends: every candidate scored (1) and trained (3)
            assert r["budget_fe"] <= r["fe"] < r["budget_fe"] + step_fe, r["arm"]
    summary = json.loads((out / "summary.json").read_text())
    repeating = summary["regimes"]["repeating"]
    tune = [json.loads(line) for line in (out / "tune.jsonl").read_text().splitlines()]
    assert all(r["budget_seconds"] is None and r["budget_fe"] == 240.0 for r in tune)  # tuned at equal FE: no clock
    assert repeating["tuning"]["batch"] in (4, 8)
    assert repeating["topk_vs_random"] and repeating["time_to_baseline"]
    assert next(r for r in repeating["time_to_baseline"] if r["arm"] == "baseline")["seconds_ratio"] == 1.0
    assert any(r["arm"] == "cache-s2-observe-0.5-shrink" and r["reused"] > 0 for r in repeating["arms"])
    assert "Top-k against random" in (out / "table.md").read_text()
