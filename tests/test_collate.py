import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBCollator
from tests.helpers import OracleModel, ce, expected_topk, ids_of, oracle_batch

LOSSES = [0.3, 2.5, 0.1, 1.7, 0.9, 3.2, 0.4, 2.2, 1.1, 0.6, 2.9, 0.2, 1.4, 0.8, 2.0, 0.5]


def dataset() -> TensorDataset:
    return TensorDataset(*oracle_batch(range(16)))


def test_collator_keeps_the_hardest_of_each_batch():
    loader = DataLoader(dataset(), batch_size=8, collate_fn=SBCollator(OracleModel(LOSSES), ce, keep=0.25))
    assert [ids_of(b) for b in loader] == [expected_topk(LOSSES, list(range(0, 8)), 0.25), [10, 14]]
    assert expected_topk(LOSSES, list(range(0, 8)), 0.25) == [1, 5]


def test_collator_refuses_the_pooled_path():
    with pytest.raises(ValueError, match="cannot pool to a fixed batch_size="):
        SBCollator(OracleModel(LOSSES), ce, batch_size=4)


def test_collator_rejects_a_non_callable_collate_fn():
    with pytest.raises(TypeError, match="collate_fn must be callable"):
        SBCollator(OracleModel(LOSSES), ce, collate_fn="stack")


def test_collator_stats():
    collator = SBCollator(OracleModel(LOSSES), ce, keep=0.5)
    list(DataLoader(dataset(), batch_size=8, collate_fn=collator))
    assert collator.stats.samples_seen == 16 and collator.stats.samples_yielded == 8
    assert torch.is_tensor(collator.engine.state_dict()["generator"])
