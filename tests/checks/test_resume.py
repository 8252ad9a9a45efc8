"""Exact resume through the one save/load helper: every front end, with every policy, the loss cache, train-mode
dropout and ``keep="auto"``, pooled and unpooled, saved in every epoch (mid-way, after its last batch, after its
pass ended) and at the start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset, default_collate

from sbdata import Auto, CostTable, HistoryPercentile, LossCache, ReducibleSelect, SBCollator, SBLoader, with_index
from sbdata.wds import sb_select
from tests.helpers import CollatedRun, OracleModel, StageStream, ce, check_save_load, ids_of, oracle_batch

CONCENTRATED = [10.0 if i % 4 == 0 else 0.01 for i in range(18)]
LOSSES = [0.3, 2.5, 0.1, 1.7, 0.9, 3.2, 0.4, 2.2, 1.1, 0.6, 2.9, 0.2, 1.4, 0.8, 2.0, 0.5, 1.9, 0.7]
SAMPLES, BATCH = 14, 4  # 4 loader batches per epoch, the last one short
EPOCHS = 3
pytestmark = pytest.mark.filterwarnings("ignore:sbdata keep='auto'")  # it may stay off in a short run


class DropoutOracle(OracleModel):
    """The oracle with dropout on its logit: in ``score_mode="train"`` every loss depends on the dropout stream."""

    def __init__(self, table: list[float]) -> None:
        super().__init__(table)
        self.dropout = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = super().forward(x)
        return torch.stack([logits[:, 0], self.dropout(logits[:, 1])], dim=1)


def case(name: str, front: str) -> tuple[OracleModel, dict[str, Any], bool]:
    """(model, engine options, whether batches carry their sample ids last), built fresh: models, policies,
    caches and controllers hold state, so each pipeline gets its own, as a fresh process would."""
    if name == "auto":  # trial after trial of one-batch windows: routing, averaging, measuring and deciding resume
        keep = Auto(keeps=(0.5,), window=1, settle=1, cycles=1, warmup=1, every=2, costs=CostTable(0.0, 1.0), run=1000)
        return OracleModel(CONCENTRATED), {"keep": keep, "policy": "rank"}, False
    # a collate_fn sees no epochs: its cache ages in loader batches (4 per epoch)
    cache = (
        LossCache(staleness=4, size=SAMPLES, unit="step")
        if front == "SBCollator"
        else LossCache(staleness=1, size=SAMPLES)
    )
    model, options, indexed = {
        "topk": (OracleModel, {"policy": "topk"}, False),
        "rank-weights": (OracleModel, {"policy": "rank", "generator": 4, "return_weights": True}, False),
        "random": (OracleModel, {"policy": "random", "generator": 7}, False),
        "history": (OracleModel, {"policy": HistoryPercentile(history=8), "generator": 7}, False),
        "importance-gradnorm": (
            OracleModel,
            {"policy": "importance", "score": "gradnorm", "return_weights": True, "generator": 4},
            False,
        ),
        "reducible": (OracleModel, {"policy": ReducibleSelect(torch.tensor(LOSSES[::-1]) / 2), "id_key": -1}, True),
        "cache": (OracleModel, {"cache": cache, "id_key": -1}, True),
        "train-dropout": (DropoutOracle, {"policy": "rank", "score_mode": "train", "generator": 5}, False),
    }[name]
    return model(LOSSES), options, indexed


CASES = ["topk", "rank-weights", "random", "history", "importance-gradnorm", "reducible", "cache", "auto",
         "train-dropout"]  # fmt: skip


def dataset(indexed: bool) -> Any:
    data = TensorDataset(*oracle_batch(range(SAMPLES)))
    return with_index(data) if indexed else data


def sbloader(name: str, batch_size: int | None) -> Callable[[], Any]:
    """SBLoader over a DataLoader that reshuffles every epoch from its own generator."""

    def make() -> SBLoader:
        model, options, indexed = case(name, "SBLoader")
        loader = DataLoader(
            dataset(indexed), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0)
        )
        return SBLoader(loader, model, ce, **{"keep": 0.5, "batch_size": batch_size, **options})

    return make


def node(name: str, batch_size: int | None) -> Callable[[], Any]:
    """SBSelector in torchdata's Loader, over a sampler -> batcher -> collate graph shuffled per epoch."""
    from torchdata.nodes import Batcher, Loader, Mapper, SamplerWrapper

    from sbdata.nodes import SBSelector

    def make() -> Any:
        model, options, indexed = case(name, "SBSelector")
        samples = dataset(indexed)
        sampler = DistributedSampler(samples, num_replicas=1, rank=0, shuffle=True, seed=3)
        source = Mapper(
            Batcher(Mapper(SamplerWrapper(sampler), samples.__getitem__), batch_size=BATCH), default_collate
        )
        selector = SBSelector(source, model, ce, **{"keep": 0.5, "batch_size": batch_size, **options})
        return Loader(selector)

    return make


def stage(name: str, batch_size: int | None) -> Callable[[], Any]:
    """The WebDataset stage over a stream that reshuffles per epoch, resumed as a user's stream would be."""

    def batches_for(epoch: int, indexed: bool) -> list[Any]:
        ids = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(epoch))
        batches = [(*oracle_batch(ids[i : i + BATCH].tolist()), ids[i : i + BATCH]) for i in range(0, SAMPLES, BATCH)]
        return batches if indexed else [batch[:2] for batch in batches]

    def make() -> StageStream:
        model, options, indexed = case(name, "sb_select")
        selection = sb_select(model, ce, **{"keep": 0.5, "batch_size": batch_size, **options})
        return StageStream(lambda epoch: batches_for(epoch, indexed), selection)

    return make


def collator(name: str, batch_size: int | None) -> Callable[[], Any]:
    """SBCollator as a StatefulDataLoader's collate_fn (it selects per loader batch: no pooling)."""

    def make() -> CollatedRun:
        model, options, indexed = case(name, "SBCollator")
        return CollatedRun(SBCollator(model, ce, **{"keep": 0.5, **options}), dataset(indexed), BATCH, shuffle_seed=0)

    return make


FRONT_ENDS = {"SBLoader": sbloader, "SBSelector": node, "sb_select": stage, "SBCollator": collator}
RUNS = [
    pytest.param(front, name, pooled, id=f"{front}-{name}-{'pooled' if pooled else 'unpooled'}")
    for front in FRONT_ENDS
    for name in CASES
    for pooled in (False, True)
    if not (pooled and front == "SBCollator")
]


@pytest.mark.parametrize(("front", "name", "pooled"), RUNS)
def test_every_front_end_and_policy_resumes_exactly(front, name, pooled):
    make = FRONT_ENDS[front](name, 3 if pooled else None)
    # torchdata's Loader starts the next epoch at once when a restored iterator has nothing left
    reference = check_save_load(make, epochs=EPOCHS, empty_rest_restarts=front == "SBSelector")
    weighted = case(name, front)[1].get("return_weights", False)  # batches arrive as (batch, weights)
    kept = [[ids_of(batch[0] if weighted else batch) for batch in epoch] for epoch in reference]
    assert kept[0] != kept[1]  # each epoch reshuffles
    assert (
        sum(len(ids) for epoch in kept for ids in epoch) < EPOCHS * SAMPLES
    )  # and selection ran: the state checked is not trivial
    if pooled and name != "auto":  # auto, while off, yields whole loader batches
        assert all(len(ids) == 3 for epoch in kept for ids in epoch[:-1])  # pooled to the batch size


def test_auto_runs_through_a_decision_in_the_checked_run():
    sb = sbloader("auto", None)()
    [list(sb) for _ in range(EPOCHS)]
    assert (
        sb.stats.auto_decisions and sb.stats.sb_steps > 0
    )  # the checked run resumed across a controller that turned on


def test_train_mode_dropout_moves_the_selection():
    # the dropout stream reached the scores: selection is not the eval-mode oracle's, so its state is checked
    train = [ids_of(b) for b in sbloader("train-dropout", None)()]
    evaluated = SBLoader(
        DataLoader(dataset(False), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0)),
        OracleModel(LOSSES),
        ce,
        keep=0.5,
        policy="rank",
        generator=5,
    )
    assert train != [ids_of(b) for b in evaluated]


def test_stage_over_numpy_batches_with_key_columns_resumes_exactly():
    def batches_for(epoch: int) -> list[dict[str, Any]]:
        ids = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(epoch)).tolist()
        return [
            {
                "npy": np.array(ids[i : i + BATCH], dtype=np.float32)[:, None],
                "cls": np.zeros(len(ids[i : i + BATCH]), dtype=np.int64),
                "__key__": [f"s{j:04d}" for j in ids[i : i + BATCH]],
            }
            for i in range(0, SAMPLES, BATCH)
        ]

    def make() -> StageStream:
        options = {"keep": 0.5, "policy": "rank", "generator": 4, "batch_size": 3}
        return StageStream(
            batches_for, sb_select(OracleModel(LOSSES), ce, split=lambda b: (b["npy"], b["cls"]), **options)
        )

    reference = check_save_load(make, epochs=EPOCHS)
    assert isinstance(reference[0][0]["npy"], np.ndarray)  # numpy stays numpy through the checkpoint
