import io

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from sbdata import LossCache, SBCollator, SBLoader, SelectionEngine, with_index
from tests.helpers import OracleModel, ce, check_resume, ids_of, oracle_batch

LOSSES = [0.3, 2.5, 0.1, 1.7, 0.9, 3.2, 0.4, 2.2, 1.1, 0.6, 2.9, 0.2, 1.4, 0.8, 2.0, 0.5]


def indexed(ids):
    x, y = oracle_batch(ids)
    return {"input": x, "target": y, "index": torch.tensor(list(ids)), "__key__": [f"s{i}" for i in ids]}


BATCHES = [indexed(range(0, 8)), indexed(range(8, 16))]


def epoch(sb):
    return [ids_of(out) for out in sb]


def test_fresh_losses_are_reused_and_stale_ones_rescored():
    model = OracleModel(LOSSES)
    sb = SBLoader(BATCHES, model, ce, keep=0.25, cache=LossCache(staleness=1, size=16), id_key="index")
    first = epoch(sb)
    assert model.calls == [8, 8]
    model.table[torch.tensor([0, 8])] = 10.0  # the model changes; cached losses do not know yet
    assert epoch(sb) == first  # epoch 1: losses from epoch 0 are 1 epoch old, still fresh: nothing scored
    assert model.calls == [8, 8]
    third = epoch(sb)  # epoch 2: 2 epochs old, stale: everything rescored, and the new losses win
    assert model.calls == [8, 8, 8, 8]
    assert 0 in third[0] and 8 in third[1]
    assert sb.stats.samples_scored == 32 and sb.stats.samples_reused == 16


def test_observed_losses_skip_scoring_and_drive_selection():
    model = OracleModel(LOSSES)
    sb = SBLoader(BATCHES, model, ce, keep=0.25, cache=LossCache(staleness=0, size=16), id_key="index")
    outputs = iter(sb)
    assert ids_of(next(outputs)) == [1, 5]
    # The training step computed losses for samples 8-11 (here: made up, so that 8 and 9 look hardest).
    sb.observe(indexed(range(8, 12)), torch.tensor([9.0, 8.0, 0.0, 0.0]))
    assert ids_of(next(outputs)) == [8, 9]
    assert model.calls == [8, 4]  # only 12-15 were scored


def test_keyed_cache_evicts_least_recently_seen_within_capacity():
    model = OracleModel(LOSSES)
    cache = LossCache(staleness=5, capacity=8)
    batches = [indexed(range(i, i + 4)) for i in (0, 4, 8)]
    sb = SBLoader(batches, model, ce, keep=0.5, cache=cache, id_key="__key__")
    epoch(sb)
    assert len(cache) == 8 and model.calls == [4, 4, 4]
    assert "s0" not in cache and all(f"s{i}" in cache for i in range(4, 12))  # s8-s11 evicted s0-s3
    sb = SBLoader(batches[1:], model, ce, keep=0.5, cache=cache, id_key="__key__")
    epoch(sb)
    assert model.calls == [4, 4, 4]  # s4-s11 were still cached: nothing scored
    sb = SBLoader(batches[:1], model, ce, keep=0.5, cache=cache, id_key="__key__")
    epoch(sb)
    assert model.calls == [4, 4, 4, 4]  # s0-s3 were evicted: rescored, evicting s4-s7 now (least recently seen)
    assert "s4" not in cache and "s0" in cache and len(cache) == 8
    assert cache.memory_bytes() == 8 * 4 + 8 * 200


def test_dense_cache_memory_and_checkpoint_size():
    cache = LossCache(size=1_000_000)
    assert cache.memory_bytes() == 8_000_000  # float32 loss + int32 time per sample
    buffer = io.BytesIO()
    torch.save(cache.state_dict(), buffer)
    assert buffer.tell() < 8_100_000  # the checkpoint is the two tensors and little else: 8 MB for 1M samples


@pytest.mark.parametrize("layout", [{"size": 16}, {"capacity": 12}])
def test_state_round_trip_with_a_partly_filled_cache(layout):
    def make():
        batches = [indexed(ids) for ids in ([3, 1, 4, 15, 9], [2, 6, 5, 12, 8], [7, 0, 11, 13, 10], [14])]
        return SBLoader(
            batches, OracleModel(LOSSES), ce, keep=0.4, policy="rank", generator=2, batch_size=3,
            cache=LossCache(staleness=1, **layout), id_key="index" if "size" in layout else "__key__",
        )  # fmt: skip

    check_resume(make, epochs=3, midpoints=range(1, 12))


def test_step_unit_counts_loader_batches():
    model = OracleModel(LOSSES)
    cache = LossCache(staleness=1, size=16, unit="step")
    sb = SBLoader([BATCHES[0]] * 4, model, ce, cache=cache, id_key="index")
    epoch(sb)
    assert model.calls == [8, 8]  # steps 0 and 2 score; 1 and 3 reuse (1 step old)


def test_with_index_shapes():
    pairs = TensorDataset(torch.arange(4.0), torch.arange(4))
    assert with_index(pairs)[2][2] == 2
    assert with_index([{"x": 1}, {"x": 2}], key="id")[1] == {"x": 2, "id": 1}
    assert with_index([10, 20])[1] == (20, 1)
    batch = next(iter(DataLoader(with_index(pairs), batch_size=4)))
    assert batch[2].tolist() == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="map-style dataset"):
        with_index(iter([1, 2]))


def test_with_index_feeds_the_cache_through_a_dataloader():
    dataset = with_index(TensorDataset(*oracle_batch(range(16))))
    model = OracleModel(LOSSES)
    loader = DataLoader(dataset, batch_size=8)
    sb = SBLoader(loader, model, ce, keep=0.25, cache=LossCache(size=len(dataset)), id_key=-1)
    assert [ids_of(o) for o in sb] == [[1, 5], [10, 14]]
    assert [ids_of(o) for o in sb] == [[1, 5], [10, 14]] and model.calls == [8, 8]


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"staleness": -1, "size": 4}, ValueError, "staleness must be an int >= 0"),
        ({"size": 4, "capacity": 4}, ValueError, "exactly one of size="),
        ({}, ValueError, "exactly one of size="),
        ({"capacity": 0}, ValueError, "capacity must be an int >= 1"),
        ({"size": 0}, ValueError, "size must be an int >= 1"),
        ({"size": 4, "unit": "hour"}, ValueError, "unit must be one of"),
    ],
)
def test_cache_construction_errors(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        LossCache(**kwargs)


def test_missing_duplicate_and_out_of_range_ids():
    model = OracleModel(LOSSES)
    with pytest.raises(ValueError, match="needs id_key="):
        SelectionEngine(model, ce, cache=LossCache(size=16))
    with pytest.raises(TypeError, match="cache must be a sbdata.LossCache"):
        SelectionEngine(model, ce, cache={"size": 16}, id_key="index")
    x, y = oracle_batch(range(4))
    engine = SelectionEngine(model, ce, cache=LossCache(size=16), id_key="index")
    with pytest.raises(ValueError, match=r"id_key='index' is not in the batch"):
        engine.process({"input": x, "target": y})
    with pytest.raises(ValueError, match=r"duplicate ids in one batch: \[2\]"):
        engine.process({"input": x, "target": y, "index": torch.tensor([2, 2, 3, 4])})
    with pytest.raises(ValueError, match=r"ids \[16\] are outside .* 0..15"):
        engine.process({"input": x, "target": y, "index": torch.tensor([0, 1, 2, 16])})
    keyed = SelectionEngine(model, ce, cache=LossCache(capacity=2), id_key="__key__")
    with pytest.raises(ValueError, match="duplicate ids in one batch: \\['a'\\]"):
        keyed.process({"input": x[:2], "target": y[:2], "__key__": ["a", "a"]})
    with pytest.raises(ValueError, match="capacity must be at least the loader's batch size"):
        keyed.process({"input": x, "target": y, "__key__": ["a", "b", "c", "d"]})


def test_observe_misuse():
    model = OracleModel(LOSSES)
    plain = SBLoader(BATCHES, model, ce)
    with pytest.raises(ValueError, match="pass cache=LossCache"):
        plain.observe(BATCHES[0], torch.zeros(8))
    cached = SBLoader(BATCHES, model, ce, cache=LossCache(size=16), id_key="index")
    with pytest.raises(ValueError, match="shape \\(B,\\)"):
        cached.observe(BATCHES[0], torch.zeros(()))
    with pytest.raises(ValueError, match="7 losses for a batch of 8"):
        cached.observe(BATCHES[0], torch.zeros(7))


def test_collator_refuses_epoch_aged_cache():
    with pytest.raises(ValueError, match="unit='step'"):
        SBCollator(OracleModel(LOSSES), ce, cache=LossCache(size=16), id_key="index")


def test_observe_reaches_the_cache_through_the_node_and_the_stage():
    from torchdata.nodes import IterableWrapper, Loader

    from sbdata.nodes import SBSelector
    from sbdata.wds import sb_select

    for build in ("node", "stage"):
        model = OracleModel(LOSSES)
        options = {"keep": 0.25, "cache": LossCache(staleness=0, size=16), "id_key": "index"}
        if build == "node":
            front = SBSelector(IterableWrapper(BATCHES), model, ce, **options)
            outputs = iter(Loader(front))
        else:
            front = sb_select(model, ce, **options)
            outputs = front(BATCHES)
        assert ids_of(next(outputs)) == [1, 5]
        front.observe(indexed(range(8, 12)), torch.tensor([9.0, 8.0, 0.0, 0.0]))
        assert ids_of(next(outputs)) == [8, 9], build
        assert model.calls == [8, 4], build


def test_bucket_sizes_round_stale_counts_up_to_a_few_sizes():
    from sbdata.cache import BUCKETS, bucket_size

    assert BUCKETS == 4
    assert [bucket_size(m, 256, 256) for m in (0, 1, 64, 65, 129, 200, 256)] == [0, 64, 64, 128, 192, 256, 256]
    assert bucket_size(70, 100, 256) == 100  # capped at the (short) batch
    assert bucket_size(3, 8, 8) == 4


def test_stale_subset_is_filled_with_the_stalest_fresh_samples():
    model = OracleModel(LOSSES)
    cache = LossCache(staleness=2, size=16)
    sb = SBLoader([indexed(range(8))], model, ce, keep=0.25, cache=cache, id_key="index")
    epoch(sb)  # epoch 0: all 8 scored at time 0
    sb.observe(indexed([4, 5, 6]), torch.tensor([5.0, 5.0, 5.0]))  # 4-6 measured at epoch 0 still
    epoch(sb), epoch(sb)  # epochs 1, 2: all fresh (<= 2 epochs old)
    assert model.calls == [8]
    sb.observe(indexed([0, 1, 2]), torch.tensor([0.5, 0.5, 0.5]))  # measured at epoch 2
    epoch(sb)  # epoch 3: 3-7 are 3 epochs old (stale); a bucket of 6 (multiples of 2) adds the stalest fresh: 0
    assert model.calls == [8, 6]
    assert sb.stats.samples_scored == 14 and 0 in cache


def test_a_cached_run_scores_in_a_handful_of_sizes():
    n, batch = 200, 32
    table = [float(v) for v in torch.rand(n, generator=torch.Generator().manual_seed(1)) * 3]
    model = OracleModel(table)
    generator = torch.Generator().manual_seed(0)
    sb = SBLoader([], model, ce, keep=0.25, cache=LossCache(staleness=1, size=n), id_key="index")
    for _ in range(12):
        order = torch.randperm(n, generator=generator)
        sb.loader = [indexed(order[i : i + batch].tolist()) for i in range(0, n, batch)]
        for out in sb:
            sb.observe(out, torch.rand(len(out["index"]), generator=generator))
    sizes = set(model.calls)
    assert sizes <= {8, 16, 24, 32, 200 % batch}, sizes  # multiples of 32 / 4, and the short last batch
    assert sb.stats.samples_reused > 0 and len(sizes) >= 3


def test_keyed_lookup_keeps_the_cached_loss_of_a_batch_key_that_was_least_recently_seen():
    # "a" is the least recently seen key when "e" needs a slot: "e" must evict "b" (not in the batch), and "a" must
    # keep its own cached loss rather than be handed the slot (and loss) of another key.
    cache = LossCache(staleness=5, capacity=4)
    cache.observe(["a", "b", "c", "d"], torch.tensor([1.0, 2.0, 3.0, 4.0]), 0)
    known = cache.lookup(["e", "a"], 0)
    assert known.count == 1 and known.positions.tolist() == [0]  # only "e" is scored
    assert known.losses[1].item() == 1.0  # "a"'s own loss
    cache.store(known, torch.tensor([5.0]), 0)
    assert "b" not in cache and all(key in cache for key in "acde")
    assert cache.lookup(["a", "c", "d", "e"], 0).count == 0
