import io
import re

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sbdata import LossCache, SBCollator, SBLoader, SelectionEngine, with_index
from sbdata.cache._cache import REFRESH
from tests.helpers import OracleModel, ce, check_save_load, ids_of, oracle_batch, roundtrip

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


@pytest.mark.parametrize("refresh", REFRESH)
def test_observed_losses_skip_scoring_and_drive_selection(refresh):
    # 8-11 were never measured: in either mode their first observation stamps them, so they need no scoring.
    model = OracleModel(LOSSES)
    cache = LossCache(staleness=0, size=16, refresh=refresh)
    sb = SBLoader(BATCHES, model, ce, keep=0.25, cache=cache, id_key="index")
    outputs = iter(sb)
    assert ids_of(next(outputs)) == [1, 5]
    # The training step computed losses for samples 8-11 (here: made up, so that 8 and 9 look hardest).
    sb.observe(indexed(range(8, 12)), torch.tensor([9.0, 8.0, 0.0, 0.0]))
    cache.settle()  # device ids land when the cache settles (each epoch's end and start); here, at once
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

    check_save_load(make, epochs=3, at=range(1, 12))


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
        ({"size": 4, "refresh": "always"}, ValueError, r"refresh must be one of \('observed', 'scored'\).*'always'"),
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
    plain = SBLoader(BATCHES, model, ce)  # no cache, no running statistics: nothing would use the losses
    with pytest.raises(
        ValueError, match=r"pass cache=LossCache\(...\) with id_key= to the loader, or drop the observe"
    ):
        plain.observe(BATCHES[0], torch.zeros(8))
    eval_normed = nn.Sequential(nn.Linear(1, 2), nn.BatchNorm1d(2))
    normed = SBLoader(BATCHES, eval_normed, ce, score_mode="eval")  # the BatchNorm check uses them
    with pytest.warns(UserWarning, match='Pass score_mode="batch"'):  # training losses 0: far below the scoring pass
        normed.observe(BATCHES[0], torch.zeros(8))
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
        options["cache"].settle()  # device ids land when the cache settles; here, at once
        assert ids_of(next(outputs)) == [8, 9], build
        assert model.calls == [8, 4], build


def test_bucket_sizes_round_stale_counts_up_to_a_few_sizes():
    from sbdata.cache._cache import BUCKETS, bucket_size

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


# ----------------------------------------------------------------- refresh: what resets a sample's age


def _scripted(cache, ids, observe_ids, steps):
    """Look ``ids`` up at times 0..steps-1, storing ``100 * now + position`` for each scored position; after the
    first lookup, observe ``observe_ids`` at time 1 with losses 7 and 8. Returns the positions scored per lookup and
    the losses each lookup handed out."""
    scored, used = [], []
    for now in range(steps):
        if now == 1:
            cache.observe(observe_ids, torch.tensor([7.0, 8.0]), 1)
            cache.settle()  # device ids are in flight until the cache settles (the epoch's end); host ids land now
        known = cache.lookup(ids, now)
        positions = known.positions.tolist()
        fresh = torch.tensor([100.0 * now + p for p in positions])
        cache.store(known, fresh, now)
        scored.append(positions)
        used.append(known.losses.index_copy(0, known.positions, fresh).tolist())
    return scored, used


@pytest.mark.parametrize("layout", [{"size": 4}, {"capacity": 4}], ids=["dense", "keyed"])
@pytest.mark.parametrize("device_ids", [False, True], ids=["host-ids", "device-ids"])
def test_refresh_decides_whether_an_observed_loss_resets_a_samples_age(layout, device_ids):
    observe_ids = torch.tensor([0, 1]) if device_ids else [0, 1]  # tensor ids land asynchronously
    want = {
        # 0, 1 observed at time 1 are next due at 3, 2 and 3 at 2: every lookup from 2 on scores half a batch.
        "observed": [[0, 1, 2, 3], [], [2, 3], [0, 1], [2, 3]],
        # Only scoring resets the age: the batch stays due together, every second lookup.
        "scored": [[0, 1, 2, 3], [], [0, 1, 2, 3], [], [0, 1, 2, 3]],
    }
    for refresh in REFRESH:
        cache = LossCache(staleness=1, refresh=refresh, **layout)
        scored, used = _scripted(cache, [0, 1, 2, 3], observe_ids, steps=5)
        assert scored == want[refresh], refresh
        assert used[1] == [7.0, 8.0, 2.0, 3.0], refresh  # the observed values are used, in either mode
        assert used[2][2:] == [202.0, 203.0] and used[3][2:] == [202.0, 203.0], refresh
    assert repr(cache).startswith(f"LossCache(staleness=1, {'size=4' if 'size' in layout else 'capacity=4'}, ")
    assert "refresh='scored'" in repr(cache)


@pytest.mark.parametrize("layout", [{"size": 4}, {"capacity": 4}], ids=["dense", "keyed"])
@pytest.mark.parametrize("refresh", REFRESH)
def test_a_first_observation_stamps_a_sample_never_measured(layout, refresh):
    cache = LossCache(staleness=1, refresh=refresh, **layout)
    cache.observe(torch.tensor([0, 1]), torch.tensor([7.0, 8.0]), 0)  # never looked up: measured at 0 in either mode
    cache.settle()
    known = cache.lookup([0, 1, 2, 3], 1)
    assert known.positions.tolist() == [2, 3] and known.losses[:2].tolist() == [7.0, 8.0]
    cache.store(known, torch.tensor([5.0, 6.0]), 1)
    assert cache.lookup([0, 1, 2, 3], 2).positions.tolist() == [0, 1]  # 2 old now; 2 and 3 scored at 1


@pytest.mark.parametrize("layout", [{"size": 4}, {"capacity": 4}], ids=["dense", "keyed"])
@pytest.mark.parametrize("refresh", REFRESH)
@pytest.mark.parametrize("ids", ["tensor", "kept-column"])
def test_an_observation_landing_after_a_later_scoring_never_passes_for_fresher(layout, refresh, ids):
    from sbdata import KeptColumn

    cache = LossCache(staleness=1, refresh=refresh, **layout)
    cache.store(cache.lookup([1], 0), torch.tensor([1.0]), 0)
    observed = torch.tensor([1]) if ids == "tensor" else KeptColumn([0, 1, 2], torch.tensor([1]))
    cache.observe(observed, torch.tensor([9.0]), 1)  # its ids stay on the device until the cache settles ...
    known = cache.lookup([1], 3)  # ... so when the sample falls due (measured at 0), it is scored again
    assert known.count == 1
    cache.store(known, torch.tensor([3.0]), 3)
    cache.settle()  # the observation (made at 1) lands now, after the scoring at 3: in every layout and mode, the
    known = cache.lookup([1], 4)  # value scored at 3 keeps its value and its time (1 old at 4: fresh)
    assert known.count == 0 and known.losses.tolist() == [3.0]


def test_observations_travel_to_the_host_in_groups_and_all_of_them_when_the_cache_settles():
    from sbdata.cache._inflight import SHIP_EVERY

    cache = LossCache(staleness=0, size=SHIP_EVERY + 8)
    for i in range(SHIP_EVERY + 3):
        cache.observe(torch.tensor([i]), torch.tensor([float(i)]), 0)
    assert cache.lookup([0], 0).count == 0  # the first SHIP_EVERY landed together (a CPU copy is ready at once)
    assert cache.lookup([SHIP_EVERY], 0).count == 1  # the next 3 are still in flight: scored
    assert len(cache) == SHIP_EVERY + 3  # asking what the cache holds settles it


def test_refresh_is_part_of_the_state():
    scored = LossCache(staleness=1, size=4, refresh="scored")
    scored.observe([0, 1], torch.tensor([7.0, 8.0]), 0)
    state = roundtrip(scored.state_dict())  # weights_only loading
    assert state["refresh"] == "scored"
    twin = LossCache(staleness=1, size=4, refresh="scored")
    twin.load_state_dict(state)
    assert twin.lookup([0, 1, 2], 1).positions.tolist() == [2]
    with pytest.raises(ValueError, match="saved cache has refresh='scored' but this one has refresh='observed'"):
        LossCache(staleness=1, size=4).load_state_dict(state)
    with pytest.raises(ValueError, match="saved cache has refresh='observed' but this one has refresh='scored'"):
        LossCache(size=4, refresh="scored").load_state_dict(LossCache(size=4).state_dict())
    loader = SBLoader(BATCHES, OracleModel(LOSSES), ce, cache=LossCache(size=16, refresh="scored"), id_key="index")
    plain = SBLoader(BATCHES, OracleModel(LOSSES), ce, cache=LossCache(size=16), id_key="index")
    with pytest.raises(ValueError, match="saved with cache=\"dense size=16 refresh='scored'\" but this loader has"):
        plain.load_state_dict(roundtrip(loader.state_dict()))  # refused before anything is loaded


@pytest.mark.parametrize("refresh", REFRESH)
def test_observed_losses_of_measured_samples_drive_selection(refresh):
    model = OracleModel(LOSSES)
    cache = LossCache(staleness=1, size=16, refresh=refresh)
    sb = SBLoader(BATCHES, model, ce, keep=0.25, cache=cache, id_key="index")
    assert epoch(sb) == [[1, 5], [10, 14]] and model.calls == [8, 8]
    sb.observe(indexed(range(8, 12)), torch.tensor([9.0, 8.0, 0.0, 0.0]))  # scored in epoch 0, observed now
    assert epoch(sb) == [[1, 5], [8, 9]] and model.calls == [8, 8]  # fresh in either mode: the observed values win
    epoch(sb)  # epoch 2: scored at 0, observed at 0: due in either mode
    assert model.calls == [8, 8, 8, 8]


class Observing:
    """An SBLoader whose every yielded batch is observed (with losses of another table), as a training loop does."""

    def __init__(self, sb, observed):
        self.sb, self.observed = sb, torch.tensor(observed)

    def __iter__(self):
        for batch in self.sb:
            self.sb.observe(batch, self.observed[batch[-1]])
            yield batch

    def state_dict(self):
        return self.sb.state_dict()

    def load_state_dict(self, state):
        self.sb.load_state_dict(state)


@pytest.mark.parametrize("batch_size", [None, 3])
def test_observing_runs_resume_exactly_in_either_refresh(batch_size):
    scored = {}
    for refresh in REFRESH:

        def make(refresh=refresh):
            loader = DataLoader(
                with_index(TensorDataset(*oracle_batch(range(14)))),
                batch_size=4,
                shuffle=True,
                generator=torch.Generator().manual_seed(0),
            )
            sb = SBLoader(
                loader, OracleModel(LOSSES), ce, keep=0.5, batch_size=batch_size, id_key=-1,
                cache=LossCache(staleness=1, size=14, refresh=refresh),
            )  # fmt: skip
            return Observing(sb, LOSSES[::-1])

        check_save_load(make, epochs=4)
        run = make()
        for _ in range(4):
            list(run)
        scored[refresh] = run.sb.stats.samples_scored
    assert scored["observed"] < scored["scored"]  # the modes did differ here


@pytest.mark.parametrize(
    ("saved", "loading", "named"),
    [
        ({"staleness": 2, "size": 8}, {"staleness": 1, "size": 8}, "staleness=2"),
        ({"unit": "step", "size": 8}, {"unit": "epoch", "size": 8}, "unit='step'"),
        ({"size": 8}, {"capacity": 8}, "layout='dense size=8'"),
        ({"capacity": 8}, {"capacity": 6}, "layout='keyed capacity=8'"),
        ({"size": 8, "refresh": "scored"}, {"size": 8}, "refresh='scored'"),
    ],
)
def test_a_cache_state_carries_its_configuration_and_refuses_another(saved, loading, named):
    cache = LossCache(**saved)
    state = roundtrip(cache.state_dict())  # weights_only=True
    assert {state["staleness"], state["unit"], state["layout"]} == {cache.staleness, cache.unit, cache.layout}
    other = LossCache(**loading)
    with pytest.raises(ValueError, match=f"saved cache has {re.escape(named)} but this one has") as error:
        other.load_state_dict(state)
    assert "build the LossCache with" in str(error.value)
    LossCache(**saved).load_state_dict(state)  # the same configuration loads


def test_a_state_saved_before_the_first_pass_resumes_into_epoch_0():
    # Such a state holds no epoch to continue: its loader's epochs, and so the cache's times, count as without it.
    def make():
        return SBLoader(
            BATCHES, OracleModel(LOSSES), ce, keep=0.25, cache=LossCache(staleness=1, size=16), id_key="index"
        )

    plain, loaded = make(), make()
    loaded.load_state_dict(roundtrip(make().state_dict()))
    for sb in (plain, loaded):
        epoch(sb), epoch(sb), epoch(sb)
        assert sb.engine.cache.state_dict()["when"].tolist() == [2] * 16  # scored in epochs 0 and 2 (staleness 1)
        assert sb.engine.model.calls == [8, 8, 8, 8]


# ----------------------------------------------------------------- the warm cache: an earlier run's entries
def earlier_run(cache, epochs=1):
    """The earlier run: ``epochs`` epochs over BATCHES that score every sample; returns its cache's state."""
    sb = SBLoader(BATCHES, OracleModel(LOSSES), ce, keep=0.25, cache=cache, id_key="index")
    for _ in range(epochs):
        epoch(sb)
    return roundtrip(cache.state_dict())


def rewarmed(state, staleness):
    cache = LossCache(staleness=staleness, size=16)
    cache.warm_start(state)
    return cache


def scored_per_epoch(sb, epochs):
    counts, before = [], 0
    for _ in range(epochs):
        epoch(sb)
        counts.append(sb.stats.samples_scored - before)
        before = sb.stats.samples_scored
    return counts


@pytest.mark.parametrize("staleness", [0, 1, 2, 3])
def test_a_warm_cache_reuses_carried_losses_for_exactly_staleness_epochs_of_the_new_run(staleness):
    # The earlier run ran 5 epochs (its clock ended at 4); the new run's epochs count from 0 all the same.
    state = earlier_run(LossCache(staleness=0, size=16), epochs=5)
    model = OracleModel([0.0] * 16)  # the new run's model finds every sample easy: the carried losses still rank
    warm = LossCache(staleness=staleness, size=16)
    warm.warm_start(state)
    assert len(warm) == 16
    sb = SBLoader(BATCHES, model, ce, keep=0.25, cache=warm, id_key="index")
    if staleness:
        assert epoch(sb) == [[1, 5], [10, 14]]  # the top 2 of each batch by the carried losses, with no forward
        assert model.calls == []
        sb = SBLoader(BATCHES, model, ce, keep=0.25, cache=rewarmed(state, staleness), id_key="index")
    counts = scored_per_epoch(sb, staleness + 2)
    # Carried entries are fresh in epochs 0 .. staleness-1 and due in epoch `staleness`; what that epoch scores is
    # then fresh for `staleness` more epochs (its age counts from the epoch it was scored in).
    assert counts[:staleness] == [0] * staleness
    assert counts[staleness] == 16
    assert counts[staleness + 1] == (16 if staleness == 0 else 0)


def test_a_warm_cache_keeps_the_carried_ages_and_selects_by_the_carried_losses():
    cache = LossCache(staleness=5, size=16)
    sb = SBLoader(BATCHES, OracleModel(LOSSES), ce, keep=0.25, cache=cache, id_key="index")
    epoch(sb)  # epoch 0 scores 0..15
    cache.observe([3], torch.tensor([99.0]), 2)  # a later measurement of sample 3, at the earlier run's epoch 2
    state = roundtrip(cache.state_dict())
    warm = LossCache(staleness=1, size=16)
    warm.warm_start(state)
    model = OracleModel([0.0] * 16)  # the new run's model finds every sample easy; the carried losses still rank
    sb = SBLoader(BATCHES, model, ce, keep=0.25, cache=warm, id_key="index")
    # Sample 3 (age 1 at the new run's epoch 0) is fresh; the others were measured 2 epochs before it (age 3): due.
    first = epoch(sb)
    assert model.calls == [8, 8]  # one bucket per batch: 0..7 hold sample 3 and 7 stale ones, bucketed to 8
    assert sb.stats.samples_scored == 15 + 1  # the bucket fills up with the freshest, sample 3 (scored too)
    assert first == [[0, 1], [8, 9]]  # all rescored to 0 (ties: the lower ids): sample 3's 99.0 was replaced


def test_a_warm_cache_refuses_another_size_naming_both_and_carries_through_an_id_map():
    state = earlier_run(LossCache(staleness=1, size=16))
    bigger = LossCache(staleness=1, size=20)
    with pytest.raises(ValueError, match=r"carried cache has size 16 but this one has size 20: pass id_map="):
        bigger.warm_start(state)
    # The new dataset puts the carried samples at ids 4..19 and drops carried sample 0; ids 0..3 are new.
    id_map = [-1, *range(5, 20)]
    bigger.warm_start(state, id_map=id_map)
    losses, when = bigger.dense_entries()
    assert when[:5].tolist() == [-1] * 5 and (when[5:] >= 0).all()
    assert losses[5:].tolist() == pytest.approx(LOSSES[1:])
    for bad, message in (([0] * 16, "distinct ids"), ([*range(16)][:15], "1-D integer sequence"),
                         ([20, *range(15)], "distinct ids in \\[0, 20\\)")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            LossCache(size=20).warm_start(state, id_map=bad)


def test_a_warm_start_is_refused_where_it_would_mix_clocks_or_layouts():
    state = earlier_run(LossCache(staleness=1, size=16))
    with pytest.raises(ValueError, match="carried cache is 'dense size=16' but this one is 'keyed capacity=16'"):
        LossCache(capacity=16).warm_start(state)
    with pytest.raises(ValueError, match="counts ages in epochs but this one in steps: build this LossCache with"):
        LossCache(size=16, unit="step").warm_start(state)
    used = LossCache(size=16)
    used.observe([0], torch.tensor([1.0]), 0)
    with pytest.raises(ValueError, match="before the run's first batch"):
        used.warm_start(state)
    with pytest.raises(ValueError, match="id_map applies to a dense cache"):
        LossCache(capacity=16).warm_start(earlier_keyed_state(), id_map=[0])


def earlier_keyed_state():
    cache = LossCache(staleness=0, capacity=16)
    sb = SBLoader(BATCHES, OracleModel(LOSSES), ce, keep=0.25, cache=cache, id_key="__key__")
    epoch(sb)
    return roundtrip(cache.state_dict())


def test_a_keyed_warm_cache_carries_by_key_and_keeps_the_most_recent_within_capacity():
    state = earlier_keyed_state()
    warm = LossCache(staleness=1, capacity=16)
    warm.warm_start(state)
    model = OracleModel(LOSSES)
    sb = SBLoader(BATCHES, model, ce, keep=0.25, cache=warm, id_key="__key__")
    assert scored_per_epoch(sb, 2) == [0, 16] and model.calls == [8, 8]
    small = LossCache(staleness=1, capacity=8)
    small.warm_start(state)
    assert len(small) == 8 and "s15" in small and "s0" not in small  # the batch seen last (8..15) stays


def test_a_warm_cache_state_resumes_within_the_new_run():
    state = earlier_run(LossCache(staleness=0, size=16), epochs=3)

    def make():
        warm = LossCache(staleness=2, size=16)
        warm.warm_start(state)
        return SBLoader(BATCHES, OracleModel(LOSSES), ce, keep=0.25, cache=warm, id_key="index")

    reference = check_save_load(make, epochs=4)
    assert [len(out) for out in reference] == [2] * 4  # two outputs per epoch
    # The state carries the warm start's shift: loaded into a cache that was never warm-started, it goes on alike.
    warm_run = make()
    scored_per_epoch(warm_run, 1)
    plain = LossCache(staleness=2, size=16)
    resumed = SBLoader(BATCHES, OracleModel(LOSSES), ce, keep=0.25, cache=plain, id_key="index")
    resumed.load_state_dict(roundtrip(warm_run.state_dict()))
    assert scored_per_epoch(resumed, 2) == scored_per_epoch(warm_run, 2) == [0, 16]
