from collections import namedtuple

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from sbdata import HistoryPercentile, KeptColumn, LossCache, PruningSampler, SBLoader, Schedule, with_index
from tests.helpers import (
    OracleModel,
    ce,
    check_save_load,
    expected_topk,
    ids_of,
    oracle_batch,
    roundtrip,
)

LOSSES = [0.3, 2.5, 0.1, 1.7, 0.9, 3.2, 0.4, 2.2, 1.1, 0.6, 2.9, 0.2, 1.4, 0.8, 2.0, 0.5]
Sample = namedtuple("Sample", ["image", "label", "key"])


def keys_for(ids):
    return [f"s{i:02d}" for i in ids]


def batch_in(form: str, ids: list[int]):
    x, y = oracle_batch(ids)
    keys = keys_for(ids)
    if form == "tuple":
        return (x, y, keys)
    if form == "dict":
        return {"input": x, "target": y, "__key__": keys, "meta": {"weight": x[:, 0] * 10}, "shard": "a.tar"}
    if form == "namedtuple":
        return Sample(x, y, keys)
    if form == "nested":
        return ((x, {"ids": torch.tensor(ids), "keys": tuple(keys)}), y)
    raise AssertionError(form)


def flat_view(form: str, out):
    """(ids from the inputs, ids from every other per-sample field) of a yielded batch."""
    if form == "tuple":
        return ids_of(out), [[int(k[1:]) for k in out[2]]]
    if form == "dict":
        assert out["shard"] == "a.tar"
        return ids_of(out), [[int(k[1:]) for k in out["__key__"]], (out["meta"]["weight"] / 10).round().int().tolist()]
    if form == "namedtuple":
        assert isinstance(out, Sample)
        return ids_of(out), [[int(k[1:]) for k in out.key]]
    (x, extra), _y = out
    assert type(extra["keys"]) is tuple  # a tuple column arrives as a tuple
    return ids_of((x,)), [extra["ids"].tolist(), [int(k[1:]) for k in extra["keys"]]]


def test_a_column_arrives_as_the_type_it_came_in_and_lazily_only_when_asked():
    """WebDataset keys and raw text work wherever their source did: json.dumps, a tokenizer's isinstance check,
    ``keys + more`` and torchdata-style ``type(a) is type(b)`` comparisons; ``lazy_columns=True`` gives the
    zero-synchronisation KeptColumn instead."""
    import json

    def batch(ids):
        return {
            "input": torch.tensor([[float(i), 0.0] for i in ids]),
            "target": torch.zeros(len(ids), dtype=torch.long),
            "__key__": [f"k{i}" for i in ids],
            "text": tuple(f"text {i}" for i in ids),
        }

    [out] = SBLoader([batch(range(4))], OracleModel(LOSSES), ce, keep=0.5)
    hardest = sorted(sorted(range(4), key=lambda i: -LOSSES[i])[:2])  # top-k keeps batch order
    assert type(out["__key__"]) is list and out["__key__"] == [f"k{i}" for i in hardest]
    assert type(out["text"]) is tuple and out["text"] == tuple(f"text {i}" for i in hardest)
    assert json.loads(json.dumps(out["__key__"])) == out["__key__"]
    assert isinstance(out["text"], (list, tuple)) and out["__key__"] + ["more"] == [*out["__key__"], "more"]
    [lazy] = SBLoader([batch(range(4))], OracleModel(LOSSES), ce, keep=0.5, lazy_columns=True)
    assert isinstance(lazy["__key__"], KeptColumn) and lazy["__key__"] == out["__key__"]
    assert type(lazy["text"].values()) is tuple and lazy["text"].values() == out["text"]


@pytest.mark.parametrize("form", ["tuple", "dict", "namedtuple", "nested"])
def test_topk_keeps_exactly_the_hardest_with_fields_aligned(form):
    batches = [list(range(0, 8)), list(range(8, 16))]
    split = (lambda b: (b[0][0], b[1])) if form == "nested" else None
    sb = SBLoader([batch_in(form, ids) for ids in batches], OracleModel(LOSSES), ce, keep=0.5, split=split)
    outs = list(sb)
    assert len(outs) == 2
    for ids, out in zip(batches, outs, strict=True):
        got, others = flat_view(form, out)
        assert got == expected_topk(LOSSES, ids, 0.5)
        for other in others:
            assert other == got  # every per-sample field names the same samples


def test_oracle_expected_indices_spelled_out():
    # losses of ids 0..7: 0.3 2.5 0.1 1.7 0.9 3.2 0.4 2.2 -> the top 3 are ids 5, 1, 7, in batch order 1, 5, 7
    (out,) = list(SBLoader([oracle_batch(range(8))], OracleModel(LOSSES), ce, keep=0.375))
    assert ids_of(out) == [1, 5, 7]


def test_plain_steps_pass_whole_batch_untouched():
    batches = [oracle_batch(range(i * 4, i * 4 + 4)) for i in range(4)]
    schedule = Schedule(interrupt=2)  # batch_idx 1 and 3 are plain
    outs = list(SBLoader(batches, OracleModel(LOSSES), ce, keep=0.5, schedule=schedule))
    assert [len(ids_of(o)) for o in outs] == [2, 4, 2, 4]
    assert outs[1][0] is batches[1][0]  # already on the device: the very same tensor


def test_schedule_window_over_two_epochs():
    batches = [oracle_batch(range(i * 4, i * 4 + 4)) for i in range(4)]
    sb = SBLoader(
        batches, OracleModel(LOSSES), ce, keep=0.5, schedule=Schedule(start=0.5, end=0.75, interrupt=0, total_steps=8)
    )
    sizes = [len(ids_of(o)) for _ in range(2) for o in sb]
    assert sizes == [4, 4, 4, 4, 2, 2, 4, 4]
    assert sb.stats.steps == 8 and sb.stats.sb_steps == 2


def test_batch_of_one_keeps_it_and_empty_batch_passes():
    model = OracleModel(LOSSES)
    empty = (torch.zeros(0, 1), torch.zeros(0, dtype=torch.long))
    outs = list(SBLoader([oracle_batch([3]), empty], model, ce, keep=0.1))
    assert ids_of(outs[0]) == [3]
    assert outs[1][0].shape == (0, 1)
    assert model.calls == [1]  # the empty batch was not scored


def test_len_delegates_and_is_refused_when_data_dependent():
    batches = [oracle_batch(range(4))] * 3
    assert len(SBLoader(batches, OracleModel(LOSSES), ce)) == 3
    with pytest.raises(TypeError, match="depend on the size of every loader batch.*drop batch_size="):
        len(SBLoader(batches, OracleModel(LOSSES), ce, batch_size=2))  # a list of batches shows no batch sizes
    with pytest.raises(TypeError, match="data-dependent"):
        len(SBLoader(batches, OracleModel(LOSSES), ce, policy="history"))


def oracle_loader(n: int = 16, batch_size: int = 4, **kwargs) -> DataLoader:
    return DataLoader(TensorDataset(*oracle_batch(range(n))), batch_size=batch_size, **kwargs)


@pytest.mark.parametrize(
    ("n", "loader_batch", "loader_drop_last", "options"),
    [
        (16, 4, False, {"keep": 0.5, "batch_size": 4}),  # 8 kept: exactly 2 batches
        (16, 4, False, {"keep": 0.5, "batch_size": 3}),  # 8 kept: 3, 3 and a short 2
        (16, 4, False, {"keep": 0.5, "batch_size": 3, "drop_last": True}),  # the short 2 dropped
        (15, 4, False, {"keep": 0.5, "batch_size": 3}),  # loader batches 4, 4, 4, 3 keep 2, 2, 2, 2
        (15, 4, True, {"keep": 0.25, "batch_size": 2}),  # the loader drops its short batch: 3 x 1 kept
        (16, 4, False, {"keep": 0.5, "batch_size": 5, "schedule": Schedule(interrupt=2)}),  # plain steps keep 4
        (16, 4, False, {"keep": 0.5, "batch_size": 3, "policy": "random"}),
    ],
)
def test_len_with_a_pool_is_the_batches_one_epoch_yields(n, loader_batch, loader_drop_last, options):
    """With batch_size= len() counts the pool's batches per epoch from the loader's batch sizes and keep_count: the
    clock a script sizes max_train_steps and its LR scheduler by, exact, in every epoch."""
    sb = SBLoader(oracle_loader(n, loader_batch, drop_last=loader_drop_last), OracleModel(LOSSES), ce, **options)
    expected = len(sb)
    assert [len(list(sb)) for _ in range(2)] == [expected, expected]


def test_len_with_a_pool_is_refused_where_the_count_depends_on_the_run():
    from sbdata import Auto, CostTable

    clocked = Schedule(start=0.5, end=0.9, total_steps=8)
    auto = Auto(costs=CostTable.forward_equivalents(), epochs=2)
    for options, named in (
        ({"schedule": clocked}, "Schedule with a clock"),
        ({"keep": auto}, "keep='auto'"),
        ({"policy": "history"}, "keeps a varying number"),
        ({"nan_policy": "drop"}, "nan_policy='drop'"),
    ):
        with pytest.raises(TypeError, match=named):
            len(SBLoader(oracle_loader(), OracleModel(LOSSES), ce, batch_size=4, **options))


def test_a_wrapped_loader_shows_the_attributes_of_the_loader_it_replaced():
    """Code written for the DataLoader keeps working: dataset (len, indexing, attributes), batch_size, sampler,
    batch_sampler, drop_last, num_workers, len(), set_epoch; each with its meaning under selection."""
    loader = oracle_loader(14, 4, shuffle=True, generator=torch.Generator().manual_seed(0), drop_last=True)
    sb = SBLoader(loader, OracleModel(LOSSES), ce, keep=0.5)
    assert len(sb.dataset) == 14 and sb.dataset.source is loader.dataset  # what selection chooses from
    assert torch.equal(sb.dataset[3][0], loader.dataset[3][0]) and sb.dataset.tensors is loader.dataset.tensors
    assert sb.sampler is loader.sampler and sb.batch_sampler is loader.batch_sampler
    assert (sb.batch_size, sb.drop_last, sb.num_workers, len(sb)) == (4, True, 0, 3)  # the loader's
    pooled = SBLoader(loader, OracleModel(LOSSES), ce, keep=0.5, batch_size=3, drop_last=False)
    assert (pooled.batch_size, pooled.drop_last, len(pooled)) == (3, False, 2)  # the pool's: 6 kept, 2 x 3
    bare = SBLoader([oracle_batch(range(4))], OracleModel(LOSSES), ce)
    assert not hasattr(bare, "dataset") and bare.batch_size is None and bare.num_workers == 0


def test_a_dataloader_built_over_the_dataset_stops_at_its_first_batch():
    """A loader rebuilt from SBLoader.dataset (what frameworks do to skip batches or change the sampler) would
    train without selection: it raises at its first batch, naming the fix."""
    sb = SBLoader(oracle_loader(), OracleModel(LOSSES), ce, keep=0.5)
    rebuilt = DataLoader(sb.dataset, batch_size=4)
    with pytest.raises(RuntimeError, match=r"reads the data without selection.*iterate the SBLoader.*sb.loader"):
        next(iter(rebuilt))
    assert len(list(DataLoader(sb.loader.dataset, batch_size=4))) == 4  # the dataset itself, on purpose


def test_the_classic_plain_loop_runs_with_one_line_its_progress_print_included(capsys):
    """The public MNIST example's loop, unchanged but for the SBLoader line: its progress print reads
    len(data), len(train_loader.dataset) and len(train_loader)."""
    model = OracleModel(LOSSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    train_loader = oracle_loader(16, 4, shuffle=True, generator=torch.Generator().manual_seed(0))
    train_loader = SBLoader(train_loader, model, ce, keep=0.5)  # the one line
    for epoch in range(1, 3):
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = ce(model(data), target)
            loss.backward()
            optimizer.step()
            if batch_idx % 2 == 0:
                print(
                    f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)} "
                    f"({100.0 * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}"
                )
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [
        "Train Epoch: 1 [0/16 (0%)]",
        "Train Epoch: 1 [4/16 (50%)]",  # 2 kept samples per batch: the position counts trained samples
        "Train Epoch: 2 [0/16 (0%)]",
        "Train Epoch: 2 [4/16 (50%)]",
    ]


def test_generator_factory_gives_one_epoch_per_pass():
    def factory():
        yield oracle_batch(range(4))
        yield oracle_batch(range(4, 8))

    sb = SBLoader(factory, OracleModel(LOSSES), ce, keep=0.5)
    assert [ids_of(o) for o in sb] == [ids_of(o) for o in sb] == [[1, 3], [5, 7]]


def test_set_epoch_reaches_the_sampler():
    seen = []

    class Sampler(torch.utils.data.Sampler):
        def __init__(self) -> None:
            self.n = 4

        def set_epoch(self, epoch: int) -> None:
            seen.append(epoch)

        def __iter__(self):
            return iter(range(self.n))

        def __len__(self) -> int:
            return self.n

    dataset = TensorDataset(*oracle_batch(range(4)))
    sb = SBLoader(DataLoader(dataset, batch_size=2, sampler=Sampler()), OracleModel(LOSSES), ce)
    sb.set_epoch(3)
    assert seen == [3]


def test_non_iterable_loader_is_rejected():
    with pytest.raises(TypeError, match="loader must be an iterable"):
        SBLoader(42, OracleModel(LOSSES), ce)


def make_pipeline(policy, batch_size=None, seed=0, epochs=2, return_weights=False):
    def make():
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randperm(16, generator=gen).tolist()
        batches = [batch_in("dict", ids[i : i + 5]) for i in range(0, 16, 5)]  # sizes 5, 5, 5, 1
        return SBLoader(
            batches,
            OracleModel(LOSSES),
            ce,
            keep=0.4,
            policy=policy() if callable(policy) else policy,
            batch_size=batch_size,
            generator=seed,
            return_weights=return_weights,
            schedule=Schedule(start=0.25, end=1.0, interrupt=3, total_steps=4 * epochs),
        )

    return make


@pytest.mark.parametrize("policy", ["topk", "rank", "random", lambda: HistoryPercentile(history=8)])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_state_round_trip_every_policy(policy, batch_size):
    make = make_pipeline(policy, batch_size)
    reference = check_save_load(make, epochs=2, at=range(1, 12))
    assert sum(map(len, reference)) >= 4


def test_state_round_trip_with_weights_in_pool():
    check_save_load(make_pipeline("rank", batch_size=2, return_weights=True), epochs=2, at=range(1, 10))


@pytest.mark.parametrize(
    ("num_workers", "shuffle_with"),
    [(0, "stateful_sampler"), (2, "stateful_sampler"), (2, "shuffle_flag")],
)
def test_state_round_trip_over_a_stateful_dataloader_shuffled(num_workers, shuffle_with):
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import RandomSampler

    dataset = TensorDataset(*oracle_batch(range(16)))

    def make():
        generator = torch.Generator().manual_seed(7)
        if shuffle_with == "shuffle_flag":
            shuffling = {"shuffle": True, "generator": generator}
        else:
            shuffling = {"sampler": RandomSampler(dataset, generator=generator)}
        loader = StatefulDataLoader(dataset, batch_size=4, num_workers=num_workers, **shuffling)
        return SBLoader(loader, OracleModel(LOSSES), ce, keep=0.5, policy="rank", generator=1)

    # Mid-run resumes, at and across the epoch boundary (4 batches per epoch). Two torchdata 0.11 behaviours,
    # seen without sbdata, shape this test: a StatefulDataLoader given the state of a loader that has not started
    # reshuffles its second epoch differently (so the initial-state check is skipped), and shuffle=True with a
    # generator and num_workers=0 reshuffles the epoch after a resume differently (so that case uses torchdata's
    # stateful RandomSampler, which restores its generator).
    check_save_load(make, epochs=2, at=[1, 3, 4, 5, 7], initial=False)


def test_resume_state_nests_the_loader_state_under_its_key():
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(TensorDataset(*oracle_batch(range(8))), batch_size=4)
    state = SBLoader(loader, OracleModel(LOSSES), ce).state_dict()
    keys = {SBLoader.ENGINE_KEY, SBLoader.LOADER_KEY, SBLoader.ORDER_KEY, SBLoader.RANK_KEY, SBLoader.SHAPE_KEY}
    assert set(state) == keys and state[SBLoader.SHAPE_KEY] == [2, 4]
    assert state[SBLoader.LOADER_KEY] is not None and state[SBLoader.ORDER_KEY] is None


def test_loader_state_into_plain_loader_is_refused():
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(TensorDataset(*oracle_batch(range(8))), batch_size=4)
    state = SBLoader(loader, OracleModel(LOSSES), ce).state_dict()
    with pytest.raises(ValueError, match="no load_state_dict"):
        SBLoader([oracle_batch(range(4))], OracleModel(LOSSES), ce).load_state_dict(state)


# ----------------------------------------------------------------- iterator ownership, resume edge cases


def test_a_new_iterator_ends_the_old_one_which_then_raises():
    batches = [oracle_batch(range(i, i + 2)) for i in range(0, 16, 2)]  # 8 loader batches
    sb = SBLoader(batches, OracleModel(LOSSES), ce, keep=0.5)
    a = iter(sb)
    [next(a) for _ in range(3)]
    b = iter(sb)
    assert len(list(b)) == 8  # the new pass is a whole epoch: nothing went to the old iterator
    with pytest.raises(RuntimeError, match="new pass over the same selection engine"):
        next(a)


def test_two_iterators_made_before_either_is_advanced_the_older_one_raises():
    batches = [oracle_batch(range(i, i + 2)) for i in range(0, 16, 2)]  # 8 loader batches
    sb = SBLoader(batches, OracleModel(LOSSES), ce, keep=0.5)
    a, b = iter(sb), iter(sb)  # the pass belongs to b from here, although neither has run yet
    with pytest.raises(RuntimeError, match="new pass over the same selection engine"):
        next(a)
    assert len(list(b)) == 8


def test_len_is_refused_with_nan_drop():
    with pytest.raises(TypeError, match="nan_policy='drop'"):
        len(SBLoader([oracle_batch(range(4))], OracleModel(LOSSES), ce, nan_policy="drop"))


def test_pooled_loader_skips_an_empty_loader_batch():
    empty = (torch.zeros(0, 1), torch.zeros(0, dtype=torch.long))
    batches = [oracle_batch(range(4)), empty, oracle_batch(range(4, 8))]
    outs = list(SBLoader(batches, OracleModel(LOSSES), ce, keep=0.5, batch_size=2))
    assert [len(ids_of(o)) for o in outs] == [2, 2]


class FailOnce(OracleModel):
    """Raises in the forward of its ``fail_at``-th call (the scoring of one loader batch), once."""

    def __init__(self, table, fail_at: int) -> None:
        super().__init__(table)
        self.fail_at = fail_at

    def forward(self, x):
        if len(self.calls) == self.fail_at:
            self.fail_at = -1
            self.calls.append(-1)
            raise RuntimeError("forward failed")
        return super().forward(x)


@pytest.mark.parametrize("stateful", [False, True])
def test_a_batch_whose_scoring_raises_is_not_counted_and_a_resume_retrains_it(stateful):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make(model):
        data = TensorDataset(*oracle_batch(range(16)))
        loader = StatefulDataLoader(data, batch_size=4) if stateful else DataLoader(data, batch_size=4)
        return SBLoader(loader, model, ce, keep=0.5, policy="rank", generator=3)

    reference = [ids_of(b) for b in make(OracleModel(LOSSES))]
    sb = make(FailOnce(LOSSES, fail_at=2))
    got = []
    with pytest.raises(RuntimeError, match="forward failed"):
        for batch in sb:
            got.append(ids_of(batch))
    assert sb.stats.steps == 2 and sb.stats.sb_steps == 2 and sb.stats.samples_seen == 8  # batch 2 not counted
    state = roundtrip(sb.state_dict())
    resumed = make(OracleModel(LOSSES))
    resumed.load_state_dict(state)
    assert got + [ids_of(b) for b in resumed] == reference  # batch 2 is trained on after all, once


@pytest.mark.parametrize(
    ("saved", "loaded", "name"),
    [
        ({"policy": "rank"}, {"policy": "topk"}, "policy"),
        ({"policy": HistoryPercentile(history=8), "keep": 0.5}, {"policy": HistoryPercentile(history=16)}, "policy"),
        ({"policy": "rank", "return_weights": True}, {"policy": "rank"}, "return_weights"),
        ({"batch_size": 3}, {"batch_size": 4}, "batch_size"),
        ({"batch_size": 3}, {}, "batch_size"),
        ({"lazy_columns": True}, {}, "lazy_columns"),
        (
            {"cache": lambda: LossCache(size=16), "id_key": 0},
            {"cache": lambda: LossCache(capacity=16), "id_key": 0},
            "cache",
        ),
    ],
)
def test_a_state_saved_with_other_options_is_refused_naming_the_option(saved, loaded, name):
    def build(options):
        options = {k: v() if k == "cache" else v for k, v in options.items()}
        return SBLoader([oracle_batch(range(4))], OracleModel(LOSSES), ce, **options)

    state = roundtrip(build(saved).state_dict())
    with pytest.raises(ValueError, match=f"saved with {name}="):
        build(loaded).load_state_dict(state)


def test_held_namedtuple_numpy_and_dataclass_batches_load_with_weights_only():
    import dataclasses

    import numpy as np

    @dataclasses.dataclass
    class Batch:
        input: torch.Tensor
        target: torch.Tensor
        keys: np.ndarray

    globals()["Batch"] = Batch  # a class the test module defines, as a user's training script would
    Batch.__qualname__ = "Batch"

    def make():
        batches = []
        for start in range(0, 16, 4):
            x, y = oracle_batch(range(start, start + 4))
            keys = np.array([f"s{i}" for i in range(start, start + 4)])
            batches.append(Sample(x, y, keys) if start % 8 else Batch(x, y, keys))
        return SBLoader(
            batches,
            OracleModel(LOSSES),
            ce,
            keep=0.5,
            batch_size=3,
            split=lambda b: (b[0], b[1]) if isinstance(b, tuple) else (b.input, b.target),
        )

    sb = make()
    it = iter(sb)
    next(it)
    state = roundtrip(sb.state_dict())  # the pool holds a dataclass piece with a numpy string field
    resumed = make()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert rest and all(isinstance(b, Batch) and b.keys.dtype.kind == "U" for b in rest[:1])


def test_a_loader_whose_state_dict_raises_counts_as_stateless():
    class Prepared(DataLoader):  # what accelerate's DataLoaderShard does without use_stateful_dataloader=True
        def state_dict(self):
            raise AttributeError("'DataLoaderShard' object has no attribute 'base_dataloader'")

        def load_state_dict(self, state):
            raise AssertionError("never called")

    def make():
        return SBLoader(Prepared(TensorDataset(*oracle_batch(range(16))), batch_size=4), OracleModel(LOSSES), ce)

    with pytest.warns(UserWarning, match="raised AttributeError.*treats it as a loader without state"):
        check_save_load(make, epochs=2)
    with pytest.warns(UserWarning, match="treats it as a loader without state") as record:
        make().state_dict()
    assert record[0].filename == __file__  # the user's line, not sbdata's


def test_unobservable_shuffle_warns_once_at_the_checkpoint_naming_the_fix():
    loader = DataLoader(TensorDataset(*oracle_batch(range(8))), batch_size=4, shuffle=True)
    sb = SBLoader(loader, OracleModel(LOSSES), ce)
    with pytest.warns(UserWarning, match=r"global RNG decides the order.*generator=torch.Generator\(\)") as record:
        sb.state_dict()
    assert record[0].filename == __file__  # it names the user's checkpoint line, not one inside sbdata
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb.state_dict()  # once


def test_stateful_dataloader_shuffle_with_its_generator_and_no_workers_warns():
    from torchdata.stateful_dataloader import StatefulDataLoader

    data = TensorDataset(*oracle_batch(range(8)))
    loader = StatefulDataLoader(data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning, match="torchdata.stateful_dataloader.sampler.RandomSampler"):
        SBLoader(loader, OracleModel(LOSSES), ce).state_dict()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_with_torchdatas_random_sampler_resumes_exactly_in_every_epoch(num_workers):
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import RandomSampler

    data = TensorDataset(*oracle_batch(range(14)))

    def make():
        sampler = RandomSampler(data, generator=torch.Generator().manual_seed(0))
        loader = StatefulDataLoader(data, batch_size=4, sampler=sampler, num_workers=num_workers)
        return SBLoader(loader, OracleModel(LOSSES), ce, keep=0.5, policy="rank", generator=2, batch_size=3)

    check_save_load(make, epochs=3)


def test_resume_restores_a_pruning_samplers_plan_from_the_loaders_state_alone():
    """Only the SBLoader's state is saved: the PruningSampler it wraps resumes the saved epoch with its saved plan,
    although the cache (restored with the loader) has moved on since the plan was made."""
    table = [0.1 * (i % 13) + 0.05 for i in range(40)]
    dataset = with_index(TensorDataset(*oracle_batch(range(40))))

    def make():
        cache = LossCache(staleness=0, size=40)
        sampler = PruningSampler(40, cache, epochs=4, prune=0.5, anneal=0.0, seed=1)
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        return SBLoader(loader, OracleModel(table), ce, keep=0.5, cache=cache, id_key=-1)

    def run(loader, epochs, stop=None):
        seen = []
        for epoch in epochs:
            loader.set_epoch(epoch)
            for step, (x, y, index) in enumerate(loader):
                seen.append(index.tolist())
                loader.observe((x, y, index), (index.float() * (epoch + 1)).sin() + 1)  # the losses move each epoch
                if (epoch, step) == stop:
                    return seen
        return seen

    whole = run(make(), range(3))
    first_loader = make()
    first = run(first_loader, range(3), stop=(1, 1))
    resumed = make()
    resumed.load_state_dict(roundtrip(first_loader.state_dict()))
    assert first + run(resumed, range(1, 3)) == whole


def test_a_resume_skips_after_set_epoch_when_a_framework_calls_it_between_iter_and_the_first_batch():
    """Lightning's resume calls ``iter(loader)``, then ``set_epoch(e)``, then asks for the first batch: the skip of
    the consumed batches waits for that batch, so a DistributedSampler draws epoch ``e``'s order, not epoch 0's."""

    def build():
        x, _ = oracle_batch(range(32))
        sampler = DistributedSampler(TensorDataset(x), num_replicas=2, rank=0, shuffle=True, seed=3)
        loader = DataLoader(TensorDataset(x, torch.zeros(32, dtype=torch.long)), batch_size=4, sampler=sampler)
        return SBLoader(loader, OracleModel([float(i % 7) for i in range(32)]), ce, keep=0.5)

    full, seen = build(), []
    for epoch in range(2):
        full.set_epoch(epoch)
        for step, batch in enumerate(full):
            seen.append(ids_of(batch))
            if epoch == 1 and step == 1:
                state = roundtrip(full.state_dict())
    resumed = build()
    resumed.load_state_dict(state)
    batches = iter(resumed)
    resumed.set_epoch(1)  # after iter(), before the first batch, as Lightning does
    assert [ids_of(b) for b in batches] == seen[6:]  # 4 loader batches per epoch per rank: 2 done in epoch 1
