import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, default_collate
from torchdata.nodes import Batcher, IterableWrapper, Loader, Mapper, ParallelMapper, Prefetcher, SamplerWrapper

from sbdata import HistoryPercentile, Schedule
from sbdata.nodes import SBSelector
from tests.helpers import OracleModel, assert_batches_equal, ce, check_save_load, expected_topk, ids_of, oracle_batch

LOSSES = [0.3, 2.5, 0.1, 1.7, 0.9, 3.2, 0.4, 2.2, 1.1, 0.6, 2.9, 0.2, 1.4, 0.8, 2.0, 0.5, 1.9, 0.7]


class OracleSamples(torch.utils.data.Dataset):
    """Sample i is a tuple (input (1,) with the id, target 0, key) or the same as a dict."""

    def __init__(self, n: int, form: str = "tuple") -> None:
        self.n, self.form = n, form

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        x, y = oracle_batch([i])
        if self.form == "dict":
            return {"input": x[0], "target": y[0], "__key__": f"s{i:02d}"}
        return x[0], y[0], f"s{i:02d}"


def keys_of(batch) -> list[int]:
    keys = batch["__key__"] if isinstance(batch, dict) else batch[2]
    return [int(k[1:]) for k in keys]


def batches_node(
    n: int = 18, batch_size: int = 4, form: str = "tuple", workers: int = 0, method: str = "thread", seed: int = 3
):
    """SamplerWrapper (seeded per-epoch shuffle) -> [Parallel]Mapper -> Batcher -> collate: one node of batches."""
    dataset = OracleSamples(n, form)
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=seed)
    node = SamplerWrapper(sampler)
    if workers:
        node = ParallelMapper(node, dataset.__getitem__, num_workers=workers, method=method)
    else:
        node = Mapper(node, dataset.__getitem__)
    return Mapper(Batcher(node, batch_size=batch_size, drop_last=False), default_collate)


@pytest.mark.parametrize("form", ["tuple", "dict"])
@pytest.mark.parametrize(("workers", "method"), [(0, "thread"), (2, "thread"), (2, "process")])
def test_topk_keeps_exactly_the_hardest_through_the_node(form, workers, method):
    inputs = list(Loader(batches_node(form=form, workers=workers, method=method)))
    source = batches_node(form=form, workers=workers, method=method)
    loader = Loader(SBSelector(source, OracleModel(LOSSES), ce, keep=0.5))
    outs = list(loader)
    assert len(outs) == len(inputs) == 5  # 18 samples in batches of 4: the last has 2
    assert sorted(i for b in inputs for i in ids_of(b)) == list(range(18))
    for batch, out in zip(inputs, outs, strict=True):
        assert ids_of(out) == expected_topk(LOSSES, ids_of(batch), 0.5)
        assert keys_of(out) == ids_of(out)  # the keys name the samples they ride with
    assert loader.root.stats.samples_kept == 2 + 2 + 2 + 2 + 1


def test_plain_iterable_source_and_epochs_follow_reset():
    batches = [oracle_batch(range(i, i + 6)) for i in (0, 6, 12)]
    schedule = Schedule(start=0.5, end=1.0, interrupt=0, total_steps=6)  # SB from loader batch 3 on
    node = SBSelector(IterableWrapper(batches), OracleModel(LOSSES), ce, keep=0.5, schedule=schedule)
    loader = Loader(node)
    first, second = [[ids_of(o) for o in loader] for _ in range(2)]
    # each Loader pass resets the node (a new epoch of the source), while the schedule clock runs on
    assert first == [list(range(0, 6)), list(range(6, 12)), list(range(12, 18))]
    assert second == [expected_topk(LOSSES, list(range(i, i + 6)), 0.5) for i in (0, 6, 12)]
    assert node.engine.step == 6 and node.engine.epoch_step == 3


def make_pipeline(policy, batch_size, workers, keep=0.4):
    def make():
        node = SBSelector(
            batches_node(n=18, batch_size=5, workers=workers),
            OracleModel(LOSSES),
            ce,
            keep=keep,
            policy=policy() if callable(policy) else policy,
            batch_size=batch_size,
            generator=11,
            schedule=Schedule(start=0.1, interrupt=3, total_steps=8),
        )
        return Loader(node)

    return make


@pytest.mark.parametrize(
    ("policy", "batch_size", "workers"),
    [("topk", None, 0), ("rank", 3, 0), ("rank", 3, 2), (lambda: HistoryPercentile(history=8), 4, 2)],
)
def test_loader_state_round_trip_mid_epoch_and_across_the_boundary(policy, batch_size, workers):
    reference = check_save_load(
        make_pipeline(policy, batch_size, workers), epochs=2, at=range(1, 12), empty_rest_restarts=True
    )
    assert sum(map(len, reference)) >= 5  # about 2-3 outputs per epoch: every midpoint, the epoch end included


def test_state_taken_at_an_epoch_end_resumes_into_the_reshuffled_next_epoch():
    def make():
        return Loader(SBSelector(batches_node(batch_size=6), OracleModel(LOSSES), ce, keep=0.5))

    loader = make()
    first = [ids_of(o) for o in loader]  # the whole first epoch: 3 batches of 6
    state = loader.state_dict()
    second = [ids_of(o) for o in loader]
    resumed = make()
    resumed.load_state_dict(state)
    assert [ids_of(o) for o in resumed] == second != first  # the sampler moved on to its next epoch's order


def test_state_nests_source_and_engine_under_class_keys():
    node = SBSelector(batches_node(), OracleModel(LOSSES), ce)
    next(node)
    state = node.state_dict()
    assert set(state) == {SBSelector.SOURCE_KEY, SBSelector.ENGINE_KEY}
    assert state[SBSelector.ENGINE_KEY]["epoch_step"] == 1
    assert state[SBSelector.SOURCE_KEY] == node.source.state_dict()


def test_prefetcher_after_the_node_is_refused_naming_the_fix():
    node = SBSelector(IterableWrapper([oracle_batch(range(4))] * 3), OracleModel(LOSSES), ce)
    with pytest.raises(RuntimeError, match=r"optimizer.step\(\).*Put it after any Prefetcher.*allow_other_threads"):
        list(Loader(Prefetcher(node, prefetch_factor=2)))


def test_other_thread_allowed_when_opted_in():
    batches = [oracle_batch(range(i, i + 4)) for i in (0, 4, 8)]
    node = SBSelector(IterableWrapper(batches), OracleModel(LOSSES), ce, keep=0.5, allow_other_threads=True)
    outs = list(Loader(Prefetcher(node, prefetch_factor=2)))
    assert [ids_of(o) for o in outs] == [expected_topk(LOSSES, list(range(i, i + 4)), 0.5) for i in (0, 4, 8)]


class NodeInWorker(IterableDataset):
    def __init__(self) -> None:
        self.loader = Loader(SBSelector(IterableWrapper([oracle_batch(range(4))]), OracleModel(LOSSES), ce))

    def __iter__(self):
        yield from self.loader  # a generator: done after the error, so the worker can be drained


def test_node_in_a_dataloader_worker_raises_naming_the_fix():
    batches = iter(DataLoader(NodeInWorker(), batch_size=None, num_workers=1))
    with pytest.raises(RuntimeError, match=r"SBSelector ran in DataLoader worker process 0.*after the DataLoader's"):
        next(batches)
    assert list(batches) == []  # drained, so the worker exits now rather than at a 5 s shutdown timeout


def test_construction_is_validated():
    with pytest.raises(TypeError, match="IterableWrapper"):
        SBSelector([oracle_batch(range(4))], OracleModel(LOSSES), ce)
    with pytest.raises(TypeError, match="allow_other_threads must be a bool"):
        SBSelector(IterableWrapper([]), OracleModel(LOSSES), ce, allow_other_threads="yes")
    with pytest.raises(ValueError, match="keep must be in"):
        SBSelector(IterableWrapper([]), OracleModel(LOSSES), ce, keep=2)


def test_resumed_node_yields_same_outputs_as_uninterrupted_directly():
    # the same check as check_save_load, spelled out once for a reader: save after 2 batches, resume in a new pipeline
    make = make_pipeline("rank", 3, 0)
    whole = list(make())
    loader = make()
    it = iter(loader)
    head = [next(it), next(it)]
    state = loader.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    for a, b in zip(head + list(resumed), whole, strict=True):
        assert_batches_equal(a, b)


def test_a_new_iter_of_the_loader_restarts_the_one_iterator_and_loses_nothing():
    batches = [oracle_batch(range(i, i + 2)) for i in range(0, 16, 2)]  # 8 loader batches
    loader = Loader(SBSelector(IterableWrapper(batches), OracleModel(LOSSES), ce, keep=0.5))
    a = iter(loader)
    [next(a) for _ in range(3)]
    b = iter(loader)
    assert a is b  # torchdata's Loader hands out one iterator per Loader and restarts it: nothing is shared
    assert len(list(b)) == 8


def test_node_state_is_loaded_through_the_loader():
    node = SBSelector(IterableWrapper([oracle_batch(range(4))]), OracleModel(LOSSES), ce)
    with pytest.raises(TypeError, match=r"Loader\(node\).load_state_dict"):
        node.load_state_dict({})


def _loading_threads() -> set[threading.Thread]:
    """The threads torchdata started (a ParallelMapper's reader, workers and sorter; a Prefetcher's)."""
    return {t for t in threading.enumerate() if getattr(t, "_target", None) is not None
            and t._target.__module__.startswith("torchdata.")}  # fmt: skip


def threaded_pipeline():
    source = batches_node(workers=2, method="thread")
    return SBSelector(Prefetcher(source, prefetch_factor=2), OracleModel(LOSSES), ce, keep=0.5)


def test_no_loading_thread_outlives_a_pass_or_a_shutdown():
    """Deterministic: the node joins the threads below it when a pass ends, and shutdown() joins them mid-pass; the
    next pass starts them again and loses nothing."""
    before = _loading_threads()  # other tests' pipelines, left to the garbage collector

    def started() -> set[threading.Thread]:
        return _loading_threads() - before

    node = threaded_pipeline()
    loader = Loader(node)
    whole = [keys_of(batch) for batch in loader]
    assert len(whole) == 5 and not started()  # a full pass: every thread joined
    it = iter(loader)
    next(it)
    assert started()  # mid-pass the threads load ahead
    node.shutdown()
    assert not started()
    with pytest.raises(RuntimeError, match=r"shut down .* start a new pass with iter\(loader\)"):
        next(it)
    assert len([keys_of(batch) for batch in loader]) == 5  # a new pass starts the threads again: all of its batches
    assert not started()


def test_a_pipeline_left_mid_pass_is_shut_down_at_interpreter_exit(tmp_path):
    """The exit hook: a script that stops after one batch ends with no torchdata thread alive (checked by an exit
    handler registered before sbdata's, so it runs after it)."""
    script = tmp_path / "left.py"
    script.write_text(
        "import atexit, threading\n"
        "def alive():\n"
        "    print(sum(1 for t in threading.enumerate() if getattr(t, '_target', None) is not None\n"
        "              and t._target.__module__.startswith('torchdata.')))\n"
        "atexit.register(alive)\n"
        "from torchdata.nodes import Loader\n"
        "from tests.test_nodes import threaded_pipeline\n"
        "it = iter(Loader(threaded_pipeline()))\n"
        "next(it)\n"
    )
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "0"
