"""SB under torch.distributed: 2 gloo ranks on CPU, started by tests/launch.py, each group under a hang guard.

A group of scenarios runs in one spawn (starting processes costs seconds on a small CI machine); each scenario
returns plain records and the tests below assert on them. The scoring model of the lockstep scenarios runs an
``all_reduce`` in its forward, as an FSDP model does, so a rank that scored one batch more than the other would
hang: the gloo timeout turns that into an error, and the launcher's timeout into a test failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from sbdata import HistoryPercentile, ImportanceDraw, LossCache, RandomK, SBLoader, Schedule, SelectionEngine, TopK
from sbdata.policies import RankWeighted, keep_count
from tests.helpers import OracleModel, ce, check_save_load, expected_topk, ids_of, oracle_batch
from tests.launch import ROOT, launch_ranks, run_job

WORLD = 2


# ----------------------------------------------------------------------------------------------- the harness
def run_scenarios(rank: int, *, names: list[str], shared: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """On one rank: the records of the named scenarios (``shared[name]``: keyword arguments of one)."""
    return {name: SCENARIOS[name](rank, **shared.get(name, {})) for name in names}


def spawn(scenarios: list[str], **shared: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the named scenarios on 2 fresh gloo ranks; the records of each rank, or a test failure on an error or a
    hang (tests/launch.py)."""
    return launch_ranks(run_scenarios, world=WORLD, names=scenarios, shared=shared)


# ----------------------------------------------------------------------------------------------- models and data
class CollectiveOracle(OracleModel):
    """An oracle whose forward is a collective, as FSDP's is: ranks that score unequally often hang."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(torch.ones(1))
        return super().forward(x)


TABLE_SIZE = 256


def table(seed: int = 0) -> list[float]:
    return (torch.rand(TABLE_SIZE, generator=torch.Generator().manual_seed(seed)) * 3 + 0.05).tolist()


def rank_batches(rank: int, sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Loader batches of the given sizes, with ids from this rank's own range."""
    start, out = rank * TABLE_SIZE // 2, []
    for size in sizes:
        out.append(oracle_batch(range(start, start + size)))
        start += size
    return out


# Rank 0 has 7 loader batches, rank 1 runs out after 4, with a short last batch of another size.
UNEVEN = {0: [8, 8, 8, 8, 8, 8, 3], 1: [8, 8, 8, 5]}
EVEN = {0: [8] * 5, 1: [8] * 5}
LATE = {0: [8, 8], 1: [8, 8, 8, 8]}  # rank 0 runs out first


def make_policy(name: str) -> Any:
    return HistoryPercentile(history=32) if name == "history" else name


# ----------------------------------------------------------------------------------------------- lockstep scenarios
def run_lockstep(
    rank: int,
    *,
    policy: str,
    pooled: bool,
    sync: str = "local",
    data: dict[int, list[int]] = UNEVEN,
    front: str = "loader",
    epochs: int = 1,
    nan_ids: tuple[int, ...] = (),
    cached: bool = False,
    **options: Any,
) -> dict[str, Any]:
    values = table()
    if cached:  # rank 0 rescores every epoch, rank 1 reuses: on some SB steps only rank 0 has samples to score
        options["cache"] = LossCache(staleness=5 * rank, size=TABLE_SIZE)
        options["id_key"] = lambda batch: batch[0][:, 0].round().long()
    for i in nan_ids:
        values[i] = float("nan")
    model = CollectiveOracle(values)
    batches = rank_batches(rank, data[rank])
    if pooled:
        options["batch_size"] = 3
    kwargs = {"keep": 0.5, "policy": make_policy(policy), "sync": sync, **options}
    sizes, ids = [], []
    if front == "loader":
        sb = SBLoader(batches, model, ce, **kwargs)
        engine = sb.engine
        for _ in range(epochs):
            outs = list(sb)
            sizes.append([len(ids_of(out)) for out in outs])
            ids.append([i for out in outs for i in ids_of(out)])
    else:  # how the torchdata node and the WebDataset stage drive the engine
        engine = SelectionEngine(model, ce, **kwargs)
        for _ in range(epochs):
            engine.start_pass()
            outs = list(engine.iterate(iter(batches)))
            sizes.append([len(ids_of(out)) for out in outs])
            ids.append([i for out in outs for i in ids_of(out)])
    stats = engine.stats
    return {
        "sizes": sizes,
        "ids": ids,
        "scoring_calls": len(model.calls),
        "steps": stats.steps,
        "sb_steps": stats.sb_steps,
        "samples_yielded": stats.samples_yielded,
        "samples_scored": stats.samples_scored,
        "own_ids": [i for batch in batches for i in ids_of(batch)],
    }


LOCKSTEP_CASES: dict[str, dict[str, Any]] = {}
for _policy in ("topk", "rank", "random", "history"):
    for _pooled in (False, True):
        for _sync in ("local", "global"):
            for _front in ("loader", "iterate"):
                LOCKSTEP_CASES[f"{_policy}-{'pooled' if _pooled else 'unpooled'}-{_sync}-{_front}"] = {
                    "policy": _policy,
                    "pooled": _pooled,
                    "sync": _sync,
                    "front": _front,
                }
LOCKSTEP_CASES.update(
    {
        "topk-pooled-even": {"policy": "topk", "pooled": True, "data": EVEN},
        "history-pooled-rank0-ends-first": {"policy": "history", "pooled": True, "data": LATE, "sync": "global"},
        "rank-pooled-drop_last-2-epochs": {"policy": "rank", "pooled": True, "drop_last": True, "epochs": 2},
        "topk-unpooled-interrupt-3-epochs-2": {
            "policy": "topk", "pooled": False, "schedule": Schedule(interrupt=3), "epochs": 2,
        },
        "history-pooled-interrupt-2": {"policy": "history", "pooled": True, "schedule": Schedule(interrupt=2)},
        "topk-unpooled-nan-drop": {  # rank 1's second batch (ids 136-143) is all NaN: nothing kept there
            "policy": "topk", "pooled": False, "nan_policy": "drop", "nan_ids": (*range(136, 144), 3),
        },
        "rank-pooled-cache-global-3-epochs": {
            "policy": "rank", "pooled": True, "sync": "global", "epochs": 3, "cached": True,
        },
        "topk-unpooled-cache-3-epochs": {"policy": "topk", "pooled": False, "epochs": 3, "cached": True},
        "rank-pooled-nan-drop-global": {
            "policy": "rank", "pooled": True, "nan_policy": "drop", "nan_ids": (*range(136, 144), 3),
            "sync": "global",
        },
    }
)  # fmt: skip


def scenario_lockstep(rank: int) -> dict[str, Any]:
    return {name: run_lockstep(rank, **case) for name, case in LOCKSTEP_CASES.items()}


def scenario_progress_disagrees(rank: int) -> dict[str, Any]:
    """A progress() that differs across ranks at the window's edge: the step is SB only where all ranks agree."""
    fraction = 0.5 if rank == 0 else 0.49  # rank 0 is inside start=0.5, rank 1 not yet
    schedule = Schedule(start=0.5, end=1.0, interrupt=0, progress=lambda: fraction)
    return run_lockstep(rank, policy="topk", pooled=True, data=EVEN, schedule=schedule)


def scenario_resume(rank: int) -> dict[str, Any]:
    """check_save_load in lockstep: both ranks save and resume at the same yielded batch."""

    def make() -> SBLoader:
        return SBLoader(rank_batches(rank, UNEVEN[rank]), CollectiveOracle(table()), ce, policy=HistoryPercentile(32),
                        batch_size=3, sync="global")  # fmt: skip

    reference = check_save_load(make, epochs=2)
    return {"batches": sum(map(len, reference))}


def scenario_errors(rank: int) -> dict[str, Any]:
    """Options that need the group, checked where it is initialised."""
    out = {}
    try:
        SelectionEngine(OracleModel(table()), ce, process_group="world")
    except TypeError as error:
        out["process_group"] = str(error)
    engine = SelectionEngine(OracleModel(table()), ce, process_group=dist.group.WORLD)
    out["lockstep"] = engine._lockstep is not None
    solos = [dist.new_group([0]), dist.new_group([1])]  # every rank creates every group, in the same order
    solo = SelectionEngine(OracleModel(table()), ce, process_group=solos[rank])
    out["solo_lockstep"] = solo._lockstep is not None
    solo.start_pass()  # a group of one in a larger job is a deliberate choice, not a late init
    with mock.patch("torch.distributed.is_initialized", return_value=False):
        early = SelectionEngine(OracleModel(table()), ce)  # as if built before init_process_group
    try:
        early.start_pass()
    except RuntimeError as error:
        out["late"] = str(error)
    try:
        SelectionEngine(OracleModel(table()), ce, process_group=solos[1 - rank])
    except (TypeError, ValueError) as error:
        out["other_group"] = str(error)
    return out


def scenario_collectives(rank: int) -> dict[str, Any]:
    """Every collective the engine issues, with its payload in bytes, for the byte counts in docs/scaling.md."""
    calls: list[tuple[str, int]] = []
    originals = dist.all_reduce, dist.all_gather

    def all_reduce(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        calls.append(("all_reduce", tensor.numel() * tensor.element_size()))
        return originals[0](tensor, *args, **kwargs)

    def all_gather(parts: list[torch.Tensor], tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        calls.append(("all_gather", tensor.numel() * tensor.element_size()))
        return originals[1](parts, tensor, *args, **kwargs)

    out = {}
    dist.all_reduce, dist.all_gather = all_reduce, all_gather
    try:
        for name, options in (
            ("topk-unpooled-local", {"policy": "topk"}),
            ("topk-pooled-local", {"policy": "topk", "batch_size": 3}),
            ("history-pooled-global", {"policy": HistoryPercentile(history=32), "batch_size": 3, "sync": "global"}),
        ):
            calls.clear()
            list(SBLoader(rank_batches(rank, [8, 8]), OracleModel(table()), ce, keep=0.5, **options))
            out[name] = list(calls)
    finally:
        dist.all_reduce, dist.all_gather = originals
    return out


# ----------------------------------------------------------------------------------------------- selection semantics
# Rank 0 holds the 8 hardest samples of the global batch (losses 2.0-2.7), rank 1 the 8 easiest (0.1-0.8).
SEMANTIC_LOSSES = [2.3, 2.0, 2.6, 2.1, 2.7, 2.4, 2.2, 2.5, 0.4, 0.8, 0.1, 0.6, 0.3, 0.7, 0.2, 0.5]


def semantic_batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    return oracle_batch(range(8 * rank, 8 * rank + 8))


def scenario_selection(rank: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for policy in ("topk", "random", "rank", "history"):
        for sync in ("local", "global"):
            chosen = HistoryPercentile(history=64) if policy == "history" else policy
            sb = SBLoader([semantic_batch(rank)], OracleModel(SEMANTIC_LOSSES), ce, keep=0.5, policy=chosen,
                          sync=sync)  # fmt: skip
            (batch,) = list(sb)
            out[f"{policy}-{sync}"] = ids_of(batch)
            if policy == "history":
                out[f"history-{sync}-buffer"] = sb.engine.policy._buffer[: sb.engine.policy._count].tolist()
    # How often rank 0 keeps its easiest sample (id 1, loss 2.0) over 100 SB steps of the same batch.
    for sync in ("local", "global"):
        sb = SBLoader([semantic_batch(rank)] * 100, OracleModel(SEMANTIC_LOSSES), ce, keep=0.5, policy="rank",
                      sync=sync)  # fmt: skip
        out[f"rank-{sync}-easiest-kept"] = sum(8 * rank + 1 in ids_of(batch) for batch in sb)
    for sync in ("local", "global"):  # importance sampling by gradient norm, weighted
        sb = SBLoader([semantic_batch(rank)], OracleModel(SEMANTIC_LOSSES), ce, keep=0.5, policy="importance",
                      score="gradnorm", return_weights=True, sync=sync)  # fmt: skip
        ((batch, weights),) = list(sb)
        out[f"importance-{sync}"] = ids_of(batch)
        out[f"importance-{sync}-weights"] = weights.tolist()
    return out


# ----------------------------------------------------------------------------------------------- DDP and FSDP
class Net(nn.Module):
    """A small float64 classifier with a buffer, so DDP's buffer broadcast is live."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        self.register_buffer("offset", torch.zeros(5))
        self.double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x + self.offset)


def net_batches(rank: int, sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(100 + rank)
    return [
        (torch.randn(n, 5, generator=generator, dtype=torch.float64), torch.randint(0, 3, (n,), generator=generator))
        for n in sizes
    ]


def gather_union(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    parts: list[Any] = [None] * WORLD
    dist.all_gather_object(parts, (x, y))
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


Tensors = Callable[[], list[torch.Tensor]]


def train_against_union(
    wrapped: nn.Module, full_params: Tensors, grads: Tensors, loader: SBLoader, check: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """Train ``wrapped`` on the loader; at each step compare its gradients with a single process's on the union
    of all ranks' kept samples, computed on a replica holding the same parameters."""
    replica = Net()
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.5)
    worst, steps, sizes = 0.0, 0, []
    for x, y in loader:
        check()
        with torch.no_grad():
            for target, value in zip(replica.parameters(), full_params(), strict=True):
                target.copy_(value)
        union_x, union_y = gather_union(x, y)
        replica.zero_grad()
        F.cross_entropy(replica(union_x), union_y).backward()
        optimizer.zero_grad()
        F.cross_entropy(wrapped(x), y).backward()
        for got, want in zip(grads(), (p.grad for p in replica.parameters()), strict=True):
            worst = max(worst, float((got - want).abs().max()))
        optimizer.step()
        steps += 1
        sizes.append(len(y))
    return {"worst": worst, "steps": steps, "sizes": sizes, "params": [p.tolist() for p in full_params()]}


def scenario_ddp(rank: int) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel

    out = {}
    for name, options, sizes in (
        ("topk-unpooled", {"policy": "topk"}, {0: [8] * 4, 1: [8] * 4}),
        ("history-pooled-global-uneven", {"policy": HistoryPercentile(history=32), "batch_size": 4, "drop_last": True,
                                          "sync": "global"}, {0: [8] * 6, 1: [8, 8, 8, 5]}),
    ):  # fmt: skip
        torch.manual_seed(0)
        ddp = DistributedDataParallel(Net())
        sb = SBLoader(net_batches(rank, sizes[rank]), ddp, F.cross_entropy, keep=0.5, **options)
        untouched = []

        def check(ddp: DistributedDataParallel = ddp, untouched: list[bool] = untouched) -> None:
            untouched.append(ddp.require_forward_param_sync)  # scoring through DDP's forward would clear it

        out[name] = train_against_union(
            ddp, lambda ddp=ddp: [p.detach() for p in ddp.parameters()],
            lambda ddp=ddp: [p.grad for p in ddp.parameters()], sb, check,
        )  # fmt: skip
        out[name]["ddp_hooks_untouched"] = all(untouched)
        out[name]["scores_through"] = type(sb.engine.sb_step.model).__name__
    return out


def scenario_fsdp2(rank: int) -> dict[str, Any]:
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    model = Net()
    fully_shard(model.body[0])
    fully_shard(model)
    sizes = {0: [8] * 6, 1: [8, 8, 8, 5]}
    sb = SBLoader(net_batches(rank, sizes[rank]), model, F.cross_entropy, keep=0.5,
                  policy=HistoryPercentile(history=32), batch_size=4, drop_last=True, sync="global")  # fmt: skip

    def full(tensor: torch.Tensor) -> torch.Tensor:
        # the root's parameters stay unsharded after a no-grad forward (FSDP2 keeps them for the next forward)
        return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor

    return train_against_union(
        model, lambda: [full(p).detach() for p in model.parameters()],
        lambda: [full(p.grad) for p in model.parameters()], sb,
    )  # fmt: skip


def scenario_fsdp1(rank: int) -> dict[str, Any]:
    from torch.distributed.fsdp import FullyShardedDataParallel

    torch.manual_seed(0)
    model = FullyShardedDataParallel(Net(), device_id=torch.device("cpu"), use_orig_params=True)
    sizes = {0: [8] * 6, 1: [8, 8, 8, 5]}
    sb = SBLoader(net_batches(rank, sizes[rank]), model, F.cross_entropy, keep=0.5, policy="rank", batch_size=4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for x, y in sb:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return {"steps": len(losses), "finite": all(map(torch.isfinite, map(torch.tensor, losses)))}


def scenario_sampler(rank: int) -> dict[str, Any]:
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    inputs, targets = oracle_batch(range(30))
    dataset = TensorDataset(inputs, targets)
    loader = DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset, shuffle=True, seed=0))
    sb = SBLoader(loader, OracleModel(table()), ce, keep=0.5)
    out = {}
    for epoch in (0, 3):
        sb.set_epoch(epoch)
        order = list(loader.sampler)  # this rank's indices for the epoch, padded to an even split
        batches = [order[i : i + 4] for i in range(0, len(order), 4)]
        expected = [i for ids in batches for i in expected_topk(table(), ids, 0.5)]
        got = [i for batch in sb for i in ids_of(batch)]
        out[epoch] = {"sampler_epoch": loader.sampler.epoch, "ids": got, "expected": expected, "order": order}
    return out


def scenario_webdataset(rank: int, shards: list[str]) -> dict[str, Any]:
    import webdataset as wds

    def collate(samples: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        return oracle_batch(int(sample[0]) for sample in samples)

    dataset = (
        wds.WebDataset(shards, nodesplitter=wds.split_by_node, workersplitter=wds.split_by_worker,
                       shardshuffle=False, empty_check=False)
        .to_tuple("id.cls")
        .map_tuple(int)  # the raw .cls bytes as an int: no decoder (WebDataset's defaults include pickle)
        .batched(4, collation_fn=collate)
    )  # fmt: skip
    sb = SBLoader(dataset, CollectiveOracle(table()), ce, keep=0.5, policy=HistoryPercentile(history=32), batch_size=3)
    sizes = [len(ids_of(batch)) for batch in sb]
    own = [i for batch in dataset for i in ids_of(batch)]
    return {"sizes": sizes, "own": own, "scoring_calls": sb.stats.sb_steps}


SCENARIOS: dict[str, Callable[..., Any]] = {
    "lockstep": scenario_lockstep,
    "progress": scenario_progress_disagrees,
    "resume": scenario_resume,
    "errors": scenario_errors,
    "collectives": scenario_collectives,
    "selection": scenario_selection,
    "ddp": scenario_ddp,
    "fsdp2": scenario_fsdp2,
    "fsdp1": scenario_fsdp1,
    "sampler": scenario_sampler,
    "webdataset": scenario_webdataset,
}


# ----------------------------------------------------------------------------------------------- the tests
def SPAWNED(test: Any) -> Any:
    """Starts two processes per group of scenarios (seconds each on a small machine)."""
    return pytest.mark.multiprocess(pytest.mark.slow(test))


@pytest.fixture(scope="module")
def engine_records() -> list[dict[str, Any]]:
    return spawn(["lockstep", "progress", "resume", "errors", "collectives", "selection"])


@pytest.fixture(scope="module")
def training_records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    import webdataset as wds

    folder = tmp_path_factory.mktemp("shards")
    shards = []
    for shard in range(3):  # split_by_node gives rank 0 shards 0 and 2, rank 1 shard 1
        path = folder / f"shard-{shard}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(10):
                sink.write({"__key__": f"{shard}-{i}", "id.cls": 128 * (shard % 2) + 10 * (shard // 2) + i})
        shards.append(str(path))
    return spawn(["ddp", "fsdp2", "fsdp1", "sampler", "webdataset"], webdataset={"shards": shards})


@pytest.mark.parametrize("case", list(LOCKSTEP_CASES))
@SPAWNED
def test_ranks_score_and_yield_in_lockstep(engine_records, case):
    r0, r1 = (records["lockstep"][case] for records in engine_records)
    assert r0["sizes"] and [len(s) for s in r0["sizes"]] == [len(s) for s in r1["sizes"]]  # same batches, per epoch
    assert r0["scoring_calls"] == r1["scoring_calls"] and r0["sb_steps"] == r1["sb_steps"]
    assert r0["steps"] == r1["steps"]
    for record in (r0, r1):
        assert record["samples_yielded"] == sum(map(sum, record["sizes"]))  # dropped leftovers are not counted
        for epoch_ids in record["ids"]:
            assert len(epoch_ids) == len(set(epoch_ids))  # no sample twice in an epoch
            assert set(epoch_ids) <= set(record["own_ids"])  # only this rank's own samples


@SPAWNED
def test_per_rank_caches_score_unequal_samples_in_equal_forwards(engine_records):
    # rank 0's cache never reuses (staleness 0), rank 1's always does after epoch 0: rank 1 runs its scoring
    # forwards on zero samples then, so that a collective forward (FSDP) still meets rank 0's.
    for case in ("rank-pooled-cache-global-3-epochs", "topk-unpooled-cache-3-epochs"):
        r0, r1 = (records["lockstep"][case] for records in engine_records)
        # 4 lockstep batches an epoch: rank 0 scores its 4 x 8 every epoch, rank 1 its 8 + 8 + 8 + 5 once
        assert (r0["samples_scored"], r1["samples_scored"]) == (3 * 32, 29)
        assert r0["scoring_calls"] == r1["scoring_calls"]


@SPAWNED
def test_unpooled_ranks_stop_at_the_shorter_rank(engine_records):
    # rank 1 has 4 batches, the last of 5 samples; rank 0's batches 5-7 are never pulled
    expected = {0: [[4, 4, 4, 4]], 1: [[4, 4, 4, 3]]}
    for rank, records in enumerate(engine_records):
        assert records["lockstep"]["topk-unpooled-local-loader"]["sizes"] == expected[rank]
        assert records["lockstep"]["topk-unpooled-local-loader"]["steps"] == 4


@SPAWNED
def test_pooled_topk_yields_the_documented_batches(engine_records):
    # Rounds 1-3 (both ranks keep 4 of 8) give 1, 1 and 2 batches of 3; in round 4 rank 0 keeps 4 of 8 and rank 1
    # 3 of 5: one batch each, rank 0 holding 1 sample over. Rank 1 then runs out: rank 0's flushed single sample
    # has no partner on rank 1 and is dropped, as are rank 0's unread batches 5-7.
    for records in engine_records:
        assert records["lockstep"]["topk-pooled-local-loader"]["sizes"] == [[3, 3, 3, 3, 3]]
        assert records["lockstep"]["topk-pooled-local-loader"]["steps"] == 4
    # Even data: 5 x 4 = 20 kept per rank, 6 full batches and a last one of 2 on both ranks.
    assert engine_records[0]["lockstep"]["topk-pooled-even"]["sizes"] == [[3] * 6 + [2]]


@SPAWNED
def test_unpooled_topk_keeps_each_batch_top_half(engine_records):
    values = table()
    for rank, records in enumerate(engine_records):
        batches = rank_batches(rank, UNEVEN[rank])[:4]
        expected = [i for batch in batches for i in expected_topk(values, ids_of(batch), 0.5)]
        assert records["lockstep"]["topk-unpooled-global-loader"]["ids"] == [expected]


@SPAWNED
def test_nan_drop_batch_with_nothing_kept_does_not_desynchronise(engine_records):
    r0, r1 = (records["lockstep"]["topk-unpooled-nan-drop"] for records in engine_records)
    # rank 1's all-NaN second batch yields nothing, so both ranks yield 3 of their 4 steps (rank 0 one step late)
    assert [len(s) for s in r0["sizes"]] == [3] and [len(s) for s in r1["sizes"]] == [3]


@SPAWNED
def test_schedule_decision_is_agreed_when_progress_differs(engine_records):
    for records in engine_records:
        assert records["progress"]["sb_steps"] == 0  # rank 1 said plain, so no rank selected
        assert records["progress"]["sizes"] == [[8] * 5]


@SPAWNED
def test_resume_in_lockstep(engine_records):
    assert engine_records[0]["resume"]["batches"] == engine_records[1]["resume"]["batches"] > 0


@SPAWNED
def test_group_options(engine_records):
    for records in engine_records:
        assert "process_group must be a torch.distributed.ProcessGroup" in records["errors"]["process_group"]
        assert records["errors"]["lockstep"] is True
        assert records["errors"]["solo_lockstep"] is False  # a group of one runs alone, without collectives
        assert "every rank" in records["errors"]["other_group"]
        assert "build the loader after init_process_group()" in records["errors"]["late"]


@SPAWNED
def test_collective_payloads_are_the_documented_ones(engine_records):
    # Per loader batch: one 32-byte all_reduce (has a batch, min size, -max size, SB step); when outputs per rank
    # may differ, one more of 8 bytes (outputs held); with sync='global' and a policy that uses it, one all_gather
    # of 4 bytes per sample of the largest batch. The round that finds no batch, then 8 bytes to agree the rest.
    flags, held, losses = ("all_reduce", 32), ("all_reduce", 8), ("all_gather", 4 * 8)
    for records in engine_records:
        calls = records["collectives"]
        assert calls["topk-unpooled-local"] == [flags, flags, flags, held]
        assert calls["topk-pooled-local"] == [flags, flags, flags, held]  # even sizes: held counts are equal
        assert calls["history-pooled-global"] == [flags, losses, held, flags, losses, held, flags, held]


@SPAWNED
def test_global_topk_and_random_equal_local(engine_records):
    for rank, records in enumerate(engine_records):
        sel = records["selection"]
        own = list(range(8 * rank, 8 * rank + 8))
        assert sel["topk-global"] == sel["topk-local"] == expected_topk(SEMANTIC_LOSSES, own, 0.5)
        assert sel["random-global"] == sel["random-local"]


@SPAWNED
def test_global_rank_weights_come_from_the_global_batch(engine_records):
    population = torch.tensor(SEMANTIC_LOSSES)
    for rank, records in enumerate(engine_records):
        own = population[8 * rank : 8 * rank + 8]
        local = RankWeighted().select(own, 0.5, torch.Generator().manual_seed(rank))  # generator=None seeds the rank
        glob = RankWeighted().select_global(own, 0.5, torch.Generator().manual_seed(rank), population, 8 * rank)
        assert records["selection"]["rank-local"] == [8 * rank + i for i in local.index.tolist()]
        assert records["selection"]["rank-global"] == [8 * rank + i for i in glob.index.tolist()]
    # Rank 0 holds only globally hard samples, so globally its weights are nearly flat and its easiest sample is
    # kept far more often than under its local ranks (inclusion about 0.43 against 0.06; 100 draws each).
    sel = engine_records[0]["selection"]
    assert sel["rank-local-easiest-kept"] < 20 < 30 < sel["rank-global-easiest-kept"]


@SPAWNED
def test_global_importance_samples_each_rank_by_its_own_gradnorms(engine_records):
    for rank, records in enumerate(engine_records):
        sel = records["selection"]
        own = torch.tensor(SEMANTIC_LOSSES[8 * rank : 8 * rank + 8])
        gradnorms = 2**0.5 * (
            1 - torch.exp(-own)
        )  # the oracle's ||softmax - onehot|| (tests/policies/test_importance.py)
        drawn = ImportanceDraw().select(gradnorms, 0.5, torch.Generator().manual_seed(rank))
        assert sel["importance-global"] == sel["importance-local"] == [8 * rank + i for i in drawn.index.tolist()]
        assert sel["importance-global-weights"] == pytest.approx((1 / (8 * drawn.prob)).tolist())  # 1 / (N prob)


@SPAWNED
def test_global_history_remembers_every_rank(engine_records):
    for rank, records in enumerate(engine_records):
        sel = records["selection"]
        own = SEMANTIC_LOSSES[8 * rank : 8 * rank + 8]
        assert sel["history-local-buffer"] == pytest.approx(own)
        assert sel["history-global-buffer"] == pytest.approx(SEMANTIC_LOSSES)  # the same on both ranks
        for sync, memory in (("local", own), ("global", SEMANTIC_LOSSES)):
            pct = torch.tensor([sum(m < v for m in memory) / len(memory) for v in own])
            draw = torch.rand(8, generator=torch.Generator().manual_seed(rank))
            expected = [8 * rank + i for i in torch.nonzero(draw < pct).squeeze(1).tolist()]
            assert sel[f"history-{sync}"] == expected, sync


@pytest.mark.parametrize("case", ["topk-unpooled", "history-pooled-global-uneven"])
@SPAWNED
def test_ddp_gradients_equal_one_process_on_the_union(training_records, case):
    r0, r1 = (records["ddp"][case] for records in training_records)
    assert r0["steps"] == r1["steps"] > 0 and r0["sizes"] == r1["sizes"]
    assert r0["worst"] < 1e-12 and r1["worst"] < 1e-12
    assert r0["params"] == r1["params"]
    assert r0["ddp_hooks_untouched"] and r0["scores_through"] == "Net"


@SPAWNED
def test_fsdp2_gradients_equal_one_process_on_the_union(training_records):
    r0, r1 = (records["fsdp2"] for records in training_records)
    assert r0["steps"] == r1["steps"] > 0
    assert r0["worst"] < 1e-12 and r1["worst"] < 1e-12


@SPAWNED
def test_fsdp1_trains_in_lockstep_on_uneven_data(training_records):
    r0, r1 = (records["fsdp1"] for records in training_records)
    assert r0["steps"] == r1["steps"] > 0 and r0["finite"] and r1["finite"]


@SPAWNED
def test_set_epoch_reaches_the_distributed_sampler(training_records):
    for records in training_records:
        for epoch in (0, 3):
            record = records["sampler"][epoch]
            assert record["sampler_epoch"] == epoch
            assert record["ids"] == record["expected"]
        assert records["sampler"][0]["order"] != records["sampler"][3]["order"]  # the epoch reshuffled


@SPAWNED
def test_webdataset_split_by_node_with_uneven_shards(training_records):
    r0, r1 = (records["webdataset"] for records in training_records)
    assert len(r0["own"]) == 20 and len(r1["own"]) == 10  # 2 shards against 1
    assert set(r0["own"]).isdisjoint(r1["own"])
    assert len(r0["sizes"]) == len(r1["sizes"]) > 0 and r0["scoring_calls"] == r1["scoring_calls"]


@pytest.mark.multiprocess
@SPAWNED
def test_example_runs_under_torchrun():
    out = run_job([str(ROOT / "examples" / "ddp.py"), "--samples", "1000", "--epochs", "2"], nproc=WORLD)
    for rank in range(WORLD):
        assert f"rank {rank}: kept" in out
    assert "final test accuracy:" in out


# ----------------------------------------------------------------------------------------------- one process
def test_sync_must_be_local_or_global():
    with pytest.raises(ValueError, match=r"sync must be one of \('local', 'global'\), got 'all'"):
        SelectionEngine(OracleModel(table()), ce, sync="all")


def test_global_sync_needs_an_initialised_group():
    with pytest.raises(ValueError, match="init_process_group.*or use sync='local'"):
        SelectionEngine(OracleModel(table()), ce, sync="global")


def test_process_group_without_a_job_is_refused():
    with pytest.raises(TypeError, match="process_group must be a torch.distributed.ProcessGroup"):
        SelectionEngine(OracleModel(table()), ce, process_group=object())


def test_one_process_runs_without_collectives():
    engine = SelectionEngine(OracleModel(table()), ce)
    assert engine._lockstep is None
    assert keep_count(0.5, 8) == len(engine.process(oracle_batch(range(8)))[1])


def test_only_rank_and_history_use_the_population():
    assert RankWeighted().uses_population and HistoryPercentile().uses_population
    assert not TopK().uses_population and not RandomK().uses_population
    scores = torch.tensor([0.3, 0.9, 0.1, 0.5])
    chosen = TopK().select_global(scores, 0.5, torch.Generator(), torch.cat([scores, scores + 5]), 0)
    assert chosen.index.tolist() == TopK().select(scores, 0.5, torch.Generator()).index.tolist() == [1, 3]
