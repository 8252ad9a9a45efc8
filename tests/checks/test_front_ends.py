"""The three front ends are one engine: same batches and seed in, identical batches out; optional imports stay so."""

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
import webdataset as wds
from torch import nn
from torchdata.nodes import IterableWrapper, Loader

from sbdata import HistoryPercentile, SBLoader, Schedule
from sbdata.nodes import SBSelector
from sbdata.wds import sb_select
from tests.helpers import (
    OracleModel,
    assert_batches_equal,
    ce,
    decode_npy_cls,
    expected_topk,
    ids_of,
    oracle_batch,
    write_oracle_shards,
)

LOSSES = [0.3, 2.5, 0.1, 1.7, 0.9, 3.2, 0.4, 2.2, 1.1, 0.6, 2.9, 0.2, 1.4, 0.8, 2.0, 0.5, 1.9, 0.7, 2.7, 1.2, 0.05]
EPOCHS = 2


def shard_batches(root) -> list:
    """WebDataset batches as its batching makes them: numpy npy/cls, lists of __key__/__url__ strings."""
    urls = write_oracle_shards(root, len(LOSSES), shards=3)
    pipeline = wds.DataPipeline(wds.SimpleShardList(urls), wds.tarfile_to_samples(), wds.map(decode_npy_cls))
    return list(pipeline.compose(wds.batched(6)))  # sizes 6, 6, 6, 3


def run_all(batches, make_options):
    """Outputs of EPOCHS passes through SBLoader, SBSelector (in a Loader) and sb_select, each freshly built
    (``make_options()`` gives each its own policy object, since policies hold state)."""

    def options():
        return {"split": lambda b: (b["npy"], b["cls"]), **make_options()}

    loader = SBLoader(batches, OracleModel(LOSSES), ce, **options())
    node_loader = Loader(SBSelector(IterableWrapper(batches), OracleModel(LOSSES), ce, **options()))
    stage = sb_select(OracleModel(LOSSES), ce, **options())
    outputs = {
        "SBLoader": [out for _ in range(EPOCHS) for out in loader],
        "SBSelector": [out for _ in range(EPOCHS) for out in node_loader],
        "sb_select": [out for _ in range(EPOCHS) for out in stage(iter(batches))],
    }
    return outputs, (loader.stats, node_loader.root.stats, stage.stats)


@pytest.mark.parametrize(
    "make_options",
    [
        lambda: {"keep": 0.5},
        lambda: {"keep": 0.4, "policy": "rank", "generator": 7, "batch_size": 4, "return_weights": True},
        lambda: {"keep": 0.5, "policy": HistoryPercentile(history=6), "generator": 3, "batch_size": 5},
        lambda: {"keep": 0.3, "policy": "random", "schedule": Schedule(start=0.25, interrupt=2, total_steps=8)},
    ],
    ids=["topk", "rank-pooled-weights", "history-pooled", "random-scheduled"],
)
def test_same_batches_and_seed_give_identical_outputs_through_every_front_end(tmp_path, make_options):
    outputs, stats = run_all(shard_batches(tmp_path), make_options)
    reference = outputs["SBLoader"]
    assert len(reference) >= EPOCHS * 2
    for name, got in outputs.items():
        assert len(got) == len(reference), name
        for i, (a, b) in enumerate(zip(got, reference, strict=True)):
            assert_batches_equal(a, b, f"{name} batch {i}")
    counts = [{k: v for k, v in one.as_dict().items() if k != "scoring_seconds"} for one in stats]  # not timing
    assert counts[0] == counts[1] == counts[2]


def test_import_sbdata_imports_neither_optional_library():
    code = (
        "import sys, sbdata, sbdata.wds\n"
        "loaded = sorted(m for m in ('torchdata', 'webdataset') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)


def test_missing_torchdata_names_the_extra_to_install():
    code = "import sys\nsys.modules['torchdata'] = None\nimport sbdata.nodes\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    expected = 'sbdata.nodes needs torchdata 0.11 (torchdata.nodes): pip install -e ".[torchdata]" from the clone'
    assert f"ImportError: {expected}" in result.stderr


def column_batches():
    """Oracle batches of 8 whose per-sample columns (WebDataset .json-style dicts, lists, strings, None) carry
    each sample's id, so alignment with the kept rows can be checked exactly."""
    batches = []
    for start in (0, 8):
        ids = list(range(start, start + 8))
        x, y = oracle_batch(ids)
        meta = [{"id": i, "boxes": [[i, i]] * 8} for i in ids]  # inner lists of length B are not cut
        batches.append((x, y, meta, [[i] * 8 for i in ids], [f"k{i}" for i in ids], [None] * 8))
    return batches


@pytest.mark.parametrize("pooled", [False, True], ids=["unpooled", "pooled"])
def test_per_sample_list_columns_stay_aligned_with_the_kept_rows_in_every_front_end(pooled):
    options = {"keep": 0.5, **({"batch_size": 3} if pooled else {})}
    batches = column_batches()
    outputs = {
        "SBLoader": list(SBLoader(batches, OracleModel(LOSSES), ce, **options)),
        "SBSelector": list(Loader(SBSelector(IterableWrapper(batches), OracleModel(LOSSES), ce, **options))),
        "sb_select": list(sb_select(OracleModel(LOSSES), ce, **options)(iter(batches))),
    }
    want = expected_topk(LOSSES, list(range(8)), 0.5) + expected_topk(LOSSES, list(range(8, 16)), 0.5)
    for name, outs in outputs.items():
        kept = [i for out in outs for i in ids_of(out)]
        assert kept == want, name
        for out in outs:
            ids = ids_of(out)
            assert [m["id"] for m in out[2]] == ids and all(len(m["boxes"]) == 8 for m in out[2]), name
            assert out[3] == [[i] * 8 for i in ids] and out[4] == [f"k{i}" for i in ids], name
            assert out[5] == [None] * len(ids), name


def test_issue_reproduction_keeps_the_metadata_dicts_of_the_kept_rows():
    torch.manual_seed(0)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    model = nn.Linear(4, 3)
    (out,) = SBLoader([(x, y, [{"id": i} for i in range(8)])], model, F.cross_entropy)
    with torch.no_grad():
        losses = F.cross_entropy(model(x), y, reduction="none").tolist()
    want = expected_topk(losses, list(range(8)), 0.5)
    assert [m["id"] for m in out[2]] == want and torch.equal(out[0], x[want]) and torch.equal(out[1], y[want])
