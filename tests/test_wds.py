import itertools

import numpy as np
import pytest
import torch
import webdataset as wds

from sbdata import HistoryPercentile, Schedule
from sbdata.wds import SelectStage, sb_select
from tests.helpers import OracleModel, ce, check_save_load, decode_npy_cls, expected_topk, ids_of, write_oracle_shards

LOSSES = [0.3, 2.5, 0.1, 1.7, 0.9, 3.2, 0.4, 2.2, 1.1, 0.6, 2.9, 0.2, 1.4, 0.8, 2.0, 0.5, 1.9, 0.7, 2.7, 1.2]
N = len(LOSSES)


def key_ids(keys) -> list[int]:
    return [int(k[1:]) for k in keys]


def dict_split(batch):
    return batch["npy"], batch["cls"]


class Tap:
    """A pass-through stage recording the loader batches that reach the stage after it."""

    def __init__(self) -> None:
        self.batches: list = []

    def __call__(self, data):
        for batch in data:
            self.batches.append(batch)
            yield batch


def view(form: str, batch):
    """(ids from the inputs, ids from the keys) of a tuple or dict batch."""
    if form == "dict":
        return ids_of((batch["npy"],)), key_ids(batch["__key__"])
    return ids_of(batch), key_ids(batch[2])


def assert_topk_per_batch(form, tap, outs, keep=0.5):
    assert len(outs) == len(tap.batches)
    assert sorted(i for b in tap.batches for i in view(form, b)[0]) == list(range(N))  # every sample, once
    for batch, out in zip(tap.batches, outs, strict=True):
        ids, keys = view(form, out)
        assert ids == expected_topk(LOSSES, view(form, batch)[0], keep)
        assert keys == ids  # keys aligned with the samples they name


def stage_for(form, **options):
    return sb_select(OracleModel(LOSSES), ce, keep=0.5, split=dict_split if form == "dict" else None, **options)


@pytest.mark.parametrize("form", ["tuple", "dict"])
def test_plain_list_of_numpy_batches_keeps_the_hardest_and_numpy_stays_numpy(form):
    x = np.arange(10, dtype=np.float32)[:, None]
    keys = [f"s{i:04d}" for i in range(10)]
    urls = [f"shard-{i % 2}.tar" for i in range(10)]
    y = np.zeros(10, dtype=np.int64)
    if form == "dict":
        batches = [{"npy": x[i : i + 5], "cls": y[i : i + 5], "__key__": keys[i : i + 5]} for i in (0, 5)]
        for batch, start in zip(batches, (0, 5), strict=True):
            batch["__url__"] = urls[start : start + 5]
    else:
        batches = [(x[i : i + 5], y[i : i + 5], keys[i : i + 5], urls[i : i + 5]) for i in (0, 5)]
    outs = list(stage_for(form)(batches))
    assert [view(form, o)[0] for o in outs] == [[1, 3, 4], [5, 7, 8]]  # top 3 of 5 losses, in batch order
    for out in outs:
        ids, keys = view(form, out)
        assert keys == ids
        fields = out if form == "tuple" else (out["npy"], out["cls"], out["__key__"], out["__url__"])
        assert isinstance(fields[0], np.ndarray) and isinstance(fields[1], np.ndarray)
        assert all(type(f) is list for f in fields[2:])  # the key and url columns arrive as lists
        assert fields[3] == [f"shard-{i % 2}.tar" for i in ids]  # __url__ subset consistently


def shard_dataset(urls, form, batch_size=None):
    ds = wds.WebDataset(urls, shardshuffle=False, empty_check=False).map(decode_npy_cls)
    if form == "tuple":
        ds = ds.to_tuple("npy", "cls", "__key__")
    return ds.batched(batch_size) if batch_size else ds


@pytest.mark.parametrize("form", ["tuple", "dict"])
def test_data_pipeline_last_stage_over_shards(tmp_path, form):
    urls = write_oracle_shards(tmp_path, N)
    tap = Tap()
    pipeline = wds.DataPipeline(
        wds.SimpleShardList(urls),
        wds.tarfile_to_samples(),
        wds.map(decode_npy_cls),
        *([wds.to_tuple("npy", "cls", "__key__")] if form == "tuple" else []),
        wds.batched(6),
        tap,
        stage_for(form),
    )
    outs = list(pipeline)
    assert len(outs) == 4  # 20 samples in batches of 6
    assert_topk_per_batch(form, tap, outs)
    assert all(isinstance(out["npy"] if form == "dict" else out[0], np.ndarray) for out in outs)  # no DataLoader


@pytest.mark.parametrize("form", ["tuple", "dict"])
@pytest.mark.parametrize("workers", [0, 2])
def test_web_loader_rebatched_in_the_main_process(tmp_path, form, workers):
    urls = write_oracle_shards(tmp_path, N, shards=2)  # one shard per worker
    tap = Tap()
    stage = stage_for(form)
    loader = (
        wds.WebLoader(shard_dataset(urls, form, batch_size=4), batch_size=None, num_workers=workers)
        .unbatched()
        .shuffle(8)
        .batched(5)
        .compose(tap, stage)
    )
    outs = list(loader)
    assert_topk_per_batch(form, tap, outs)
    assert stage.stats.samples_seen == N and stage.stats.samples_kept == sum(len(view(form, o)[0]) for o in outs)


def test_stage_inside_the_workers_raises_naming_the_fix(tmp_path):
    urls = write_oracle_shards(tmp_path, N, shards=1)
    ds = shard_dataset(urls, "tuple", batch_size=4).compose(stage_for("tuple"))  # the mistake: inside the dataset
    # WebLoader(ds, batch_size=None, num_workers=1) iterates exactly this DataLoader; iterating it directly lets the
    # test drain the worker after the error, which otherwise costs a 5 s join timeout at the loader's shutdown
    batches = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1))
    with pytest.raises(RuntimeError, match=r"sb_select ran in DataLoader worker process 0.*WebLoader\(ds, \.\.\.\)"):
        next(batches)
    assert list(batches) == []


class ListPipeline:
    """A list of batches through a stage, resumable: the stage restores selection, the list skips what was read."""

    def __init__(self, batches, stage: SelectStage) -> None:
        self.batches, self.stage = batches, stage

    def __iter__(self):
        return self.stage(itertools.islice(self.batches, self.stage.resume_skip, None))

    def state_dict(self):
        return self.stage.state_dict()

    def load_state_dict(self, state):
        self.stage.load_state_dict(state)


def list_pipeline(policy, batch_size):
    def make():
        ids = torch.randperm(N, generator=torch.Generator().manual_seed(5)).tolist()
        batches = [
            {"npy": np.array(ids[i : i + 6], dtype=np.float32)[:, None], "cls": np.zeros(len(ids[i : i + 6]), int)}
            | {"__key__": [f"s{j:04d}" for j in ids[i : i + 6]]}
            for i in range(0, N, 6)
        ]  # sizes 6, 6, 6, 2
        stage = sb_select(
            OracleModel(LOSSES),
            ce,
            keep=0.4,
            split=dict_split,
            policy=policy() if callable(policy) else policy,
            batch_size=batch_size,
            generator=2,
            schedule=Schedule(start=0.2, interrupt=3, total_steps=8),
        )
        return ListPipeline(batches, stage)

    return make


@pytest.mark.parametrize(
    ("policy", "batch_size"), [("topk", None), ("rank", 3), (lambda: HistoryPercentile(history=8), 3)]
)
def test_stage_state_round_trip_over_a_list_source(policy, batch_size):
    reference = check_save_load(list_pipeline(policy, batch_size), epochs=2, at=range(1, 10))
    assert sum(map(len, reference)) >= 4


def test_resume_skip_is_zero_unless_a_saved_epoch_is_open():
    make = list_pipeline("topk", None)
    pipeline = make()
    it = iter(pipeline)
    next(it)
    assert pipeline.stage.resume_skip == 0
    resumed = make()
    resumed.load_state_dict(pipeline.state_dict())
    assert resumed.stage.resume_skip == 1
    list(pipeline)  # finish the epoch: its state is then closed
    resumed.load_state_dict(pipeline.state_dict())
    assert resumed.stage.resume_skip == 0


def test_validation():
    with pytest.raises(TypeError, match="iterable of batches"):
        stage_for("tuple")(42)
    with pytest.raises(ValueError, match="keep must be in"):
        sb_select(OracleModel(LOSSES), ce, keep=0)


def test_a_new_call_of_the_stage_ends_the_old_iterator_which_then_raises():
    batches = [{"npy": np.array([[i], [i + 1]], dtype=np.float32), "cls": np.zeros(2, int)} for i in range(0, 16, 2)]
    stage = sb_select(OracleModel(LOSSES), ce, keep=0.5, split=dict_split)
    a = stage(iter(batches))
    [next(a) for _ in range(3)]
    b = stage(iter(batches))
    assert len(list(b)) == 8
    with pytest.raises(RuntimeError, match="new pass over the same selection engine"):
        next(a)


def test_two_calls_of_the_stage_before_either_is_advanced_the_older_iterator_raises():
    batches = [{"npy": np.array([[i], [i + 1]], dtype=np.float32), "cls": np.zeros(2, int)} for i in range(0, 16, 2)]
    stage = sb_select(OracleModel(LOSSES), ce, keep=0.5, split=dict_split)
    a, b = stage(iter(batches)), stage(iter(batches))  # the pass belongs to b, although neither has run yet
    with pytest.raises(RuntimeError, match="new pass over the same selection engine"):
        next(a)
    assert len(list(b)) == 8
