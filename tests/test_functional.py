import random
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import sbdata
from sbdata import select_using_loss, should_selective_backprop
from sbdata.engine import should_selective_backprop as schedule_rule
from tests.helpers import OracleModel, ce, ids_of, oracle_batch

LOSSES = [0.3, 2.5, 0.1, 1.7, 0.9, 3.2, 0.4, 2.2, 1.1, 0.6, 2.9, 0.2, 1.4, 0.8, 2.0, 0.5]


def test_composer_names_are_exported_at_top_level():
    assert sbdata.should_selective_backprop is schedule_rule is should_selective_backprop


def test_select_using_loss_returns_aligned_subset_of_composer_size():
    x, y = oracle_batch(range(16))
    y = torch.arange(16)  # targets that name their sample, to check alignment
    model = OracleModel(LOSSES)

    def loss(outputs, targets, reduction="none"):  # oracle loss; ignores the label value
        return ce(outputs, torch.zeros_like(targets), reduction=reduction)

    gen = torch.Generator().manual_seed(0)
    kept_x, kept_y = select_using_loss(x, y, model, loss, keep=0.33, generator=gen)
    assert kept_x.shape == (5, 1) and kept_y.shape == (5,)  # int(0.33 * 16) = 5, Composer's count
    assert ids_of((kept_x,)) == kept_y.tolist()


def test_select_using_loss_prefers_high_losses():
    x, y = oracle_batch(range(16))
    model, gen, counts = OracleModel(LOSSES), torch.Generator().manual_seed(1), np.zeros(16)
    for _ in range(2000):
        kept_x, _ = select_using_loss(x, y, model, ce, keep=0.25, generator=gen)
        counts[ids_of((kept_x,))] += 1
    order = np.argsort(LOSSES)
    assert counts[order[-4:]].sum() > 3 * counts[order[:4]].sum()


def test_select_using_loss_same_generator_state_same_result():
    x, y = oracle_batch(range(16))
    a = select_using_loss(x, y, OracleModel(LOSSES), ce, generator=torch.Generator().manual_seed(5))
    b = select_using_loss(x, y, OracleModel(LOSSES), ce, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0])


def test_select_using_loss_with_a_generator_leaves_global_rngs_and_modes_alone():
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.BatchNorm1d(8), nn.Linear(8, 3)).train()
    bn_before = model[2].running_mean.clone()
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    states = torch.random.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    select_using_loss(x, y, model, F.cross_entropy, generator=torch.Generator().manual_seed(0))
    select_using_loss(x, y, model, F.cross_entropy, generator=torch.Generator().manual_seed(0), score_mode="train")
    assert torch.equal(torch.random.get_rng_state(), states[0])
    assert np.array_equal(np.random.get_state()[1], states[1]) and random.getstate() == states[2]
    assert model.training and torch.equal(model[2].running_mean, bn_before)


def test_select_using_loss_without_a_generator_consumes_one_numpy_draw_and_nothing_else():
    """Documented exactly: one ``np.random.randint(0, 2**63 - 1, dtype=np.int64)`` per call, its seed; torch's and
    Python's global RNGs untouched, and the modes restored."""
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.BatchNorm1d(8), nn.Linear(8, 3)).train()
    bn_before = model[2].running_mean.clone()
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    np.random.seed(11)
    torch_state, python_state = torch.random.get_rng_state(), random.getstate()
    kept_x, _ = select_using_loss(x, y, model, F.cross_entropy, keep=0.25)
    after = np.random.get_state()[1].copy()
    assert torch.equal(torch.random.get_rng_state(), torch_state) and random.getstate() == python_state
    assert model.training and torch.equal(model[2].running_mean, bn_before)
    np.random.seed(11)
    seed = int(np.random.randint(0, 2**63 - 1, dtype=np.int64))
    assert np.array_equal(np.random.get_state()[1], after)  # exactly that one draw
    expected, _ = select_using_loss(
        x, y, model, F.cross_entropy, keep=0.25, generator=torch.Generator().manual_seed(seed)
    )
    assert torch.equal(kept_x, expected)


def test_select_using_loss_downsamples_for_scoring_only():
    shapes = []

    class Probe(nn.Module):
        def forward(self, x):
            shapes.append(tuple(x.shape))
            return x.mean(dim=(2, 3))

    x, y = torch.randn(8, 3, 8, 8), torch.zeros(8, dtype=torch.long)
    kept_x, _ = select_using_loss(x, y, Probe(), F.cross_entropy, keep=0.5, scale_factor=0.5)
    assert shapes == [(8, 3, 4, 4)] and kept_x.shape == (4, 3, 8, 8)


def test_select_using_loss_batch_of_one_keeps_it():
    x, y = oracle_batch([3])
    kept_x, _ = select_using_loss(x, y, OracleModel(LOSSES), ce, keep=0.5)
    assert ids_of((kept_x,)) == [3]


def test_composer_errors():
    x, y = oracle_batch(range(4))
    model = OracleModel(LOSSES)
    with pytest.raises(ValueError, match="Input must be 3D, 4D, or 5D if scale_factor != 1, got 2"):
        select_using_loss(x, y, model, ce, scale_factor=0.5)
    with pytest.raises(ValueError, match="scale_factor must be <= 1"):
        select_using_loss(torch.randn(4, 1, 8), y, model, ce, scale_factor=2)
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        select_using_loss(x, y, model, "ce")
    with pytest.raises(TypeError, match=re.escape("must take a keyword argument `reduction`.")):  # Composer's phrase
        select_using_loss(x, y, model, lambda outputs, targets: outputs.sum())
    with pytest.raises(ValueError, match=r"keep must be in \(0, 1\]"):
        select_using_loss(x, y, model, ce, keep=0)


def test_plain_callable_model_is_accepted():
    x, y = oracle_batch(range(8))
    oracle = OracleModel(LOSSES)
    kept_x, _ = select_using_loss(x, y, lambda inputs: oracle(inputs), ce, keep=0.5)
    assert kept_x.shape == (4, 1)


def seeded_run(seed_numpy, seed_torch=None, calls: int = 6) -> list[list[int]]:
    """Kept ids of ``calls`` select_using_loss calls without a generator in a loop seeded as a Composer migrant's
    (``np.random.seed``, and ``torch.manual_seed`` as ``seed_all`` does) whose training step draws from the global
    RNGs (dropout, DataLoader shuffling, numpy augmentations)."""
    x, y = oracle_batch(range(16))
    model = OracleModel(LOSSES)
    np.random.seed(seed_numpy)
    if seed_torch is not None:
        torch.manual_seed(seed_torch)
    runs = []
    for _ in range(calls):
        runs.append(ids_of(select_using_loss(x, y, model, ce, keep=0.25)))
        torch.rand(3)  # the training step
        np.random.rand(2)
    return runs


def test_select_using_loss_without_a_generator_repeats_a_globally_seeded_run():
    first = seeded_run(3, seed_torch=3)
    assert seeded_run(3, seed_torch=3) == first  # seed_all(3), twice in one process: the same selections
    assert seeded_run(3) == first  # numpy's seed alone decides, as in Composer (torch's RNG has moved on)
    assert seeded_run(4, seed_torch=3) != first
    assert len({tuple(ids) for ids in first}) > 1  # each call draws anew


def test_select_using_loss_ranks_float64_losses_in_float64():
    k = torch.arange(8, dtype=torch.float64)
    order = torch.tensor([3, 7, 0, 5, 1, 6, 2, 4])  # sample i has loss 1 + order[i] * 1e-12

    def loss(outputs, targets, reduction="none"):
        return 1 + outputs[:, 0] * 1e-12  # distinct in float64, all 1.0 in float32

    x = order.to(torch.float64)[:, None]
    kept, _ = select_using_loss(x, k, nn.Identity(), loss, keep=1.0, generator=torch.Generator().manual_seed(0))
    assert kept[:, 0].tolist() == order.tolist()  # keep=1 keeps all, in batch order
    topk = list(sbdata.SBLoader([(x, k)], nn.Identity(), loss, keep=0.5))
    assert topk[0][0][:, 0].tolist() == [7, 5, 6, 4]  # the four highest losses, not the first four (float32 ties)
    ranks = sbdata.policies.rank_log_weights(1 + x[:, 0] * 1e-12, 0.5)
    assert torch.argsort(ranks).tolist() == torch.argsort(order).tolist()
