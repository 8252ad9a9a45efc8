"""PruningSampler: which samples each epoch keeps, their weights, resume, workers, SBLoader and two gloo ranks."""

import io
import math
import random
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sbdata import LossCache, PruningSampler, SBLoader, with_index
from sbdata.pruning import below_percentile, infobatch, random_like_infobatch, top_losses
from tests.launch import launch_ranks


def oracle_cache(losses, unseen=()):
    """A dense cache holding ``losses`` (measured in epoch 0), minus the ``unseen`` ids."""
    losses = torch.as_tensor(losses, dtype=torch.float32)
    cache = LossCache(size=len(losses))
    seen = torch.tensor([i for i in range(len(losses)) if i not in set(unseen)], dtype=torch.long)
    cache.observe(seen, losses[seen], 0)
    return cache


def test_infobatch_prunes_half_of_the_below_mean_samples_and_rescales_the_rest():
    losses = torch.arange(20, dtype=torch.float32)  # mean 9.5: ids 0..9 are below it
    sampler = PruningSampler(20, oracle_cache(losses), epochs=8, prune=0.5, seed=3)
    sampler.set_epoch(1)
    kept = sorted(sampler)
    low_kept = [i for i in kept if i < 10]
    assert len(low_kept) == 5 and set(range(10, 20)) <= set(kept)  # floor(0.5 * 10) low ones pruned, no high one
    weights = sampler.weights(torch.arange(20))
    expected = torch.zeros(20)
    expected[10:] = 1.0
    expected[low_kept] = 2.0  # 1 / (1 - 0.5)
    assert torch.equal(weights, expected)
    assert len(sampler) == 15 == len(list(sampler)) and sampler.kept == 15


def test_unseen_and_non_finite_samples_are_kept_and_left_out_of_the_mean():
    losses = torch.tensor([0.0, 1.0, 2.0, 3.0, float("nan"), 100.0, 0.5, 0.5])
    cache = oracle_cache(losses, unseen=(5,))  # the 100 is never seen: it neither counts in the mean nor is pruned
    sampler = PruningSampler(8, cache, epochs=4, prune=0.99, seed=0)
    sampler.set_epoch(1)
    # known finite losses 0, 1, 2, 3, 0.5, 0.5: mean 7/6, below it ids 0, 1, 6, 7 -> floor(0.99 * 4) = 3 pruned
    kept = set(sampler)
    assert {2, 3, 4, 5} <= kept and len(kept & {0, 1, 6, 7}) == 1


def test_annealing_epochs_and_the_first_epoch_train_on_everything():
    cache = oracle_cache(torch.arange(16, dtype=torch.float32))
    sampler = PruningSampler(16, cache, epochs=8, prune=0.5, anneal=0.25)
    sizes = []
    for epoch in range(8):
        sampler.set_epoch(epoch)
        sizes.append(len(sampler))
    assert sizes == [12] * 6 + [16, 16]  # ceil(0.25 * 8) = 2 full epochs at the end
    assert torch.equal(sampler.weights(torch.arange(16)), torch.ones(16))
    fresh = PruningSampler(16, LossCache(size=16), epochs=8)  # nothing known yet: nothing pruned
    assert sorted(fresh) == list(range(16))


def test_percentile_and_random_rules_with_oracle_losses():
    losses = torch.arange(10, dtype=torch.float32)
    known = torch.ones(10, dtype=torch.bool)
    generator = torch.Generator().manual_seed(0)
    weights = below_percentile(losses, known, 0.5, generator, percentile=30.0)  # 30th percentile 2.7: ids 0, 1, 2
    assert int((weights[:3] == 0).sum()) == 1 and torch.all(weights[3:] == 1)
    assert sorted(weights[:3].tolist()) == [0.0, 2.0, 2.0]
    control = random_like_infobatch(losses, known, 0.5, generator)  # as many as infobatch prunes, weight 1
    assert int((control == 0).sum()) == int((infobatch(losses, known, 0.5, generator) == 0).sum()) == 2
    assert set(control.tolist()) == {0.0, 1.0}
    sampler = PruningSampler(10, oracle_cache(losses), epochs=3, rule=partial(below_percentile, percentile=30.0))
    sampler.set_epoch(1)
    assert len(sampler) == 9


def test_top_losses_keeps_the_highest_losses_and_exactly_the_recheck_count_of_the_rest():
    losses = torch.tensor([5.0, 9.0, 1.0, 7.0, 7.0, 3.0, 8.0, 0.0, 2.0, 6.0, 4.0, 100.0])
    known = torch.ones(12, dtype=torch.bool)
    known[11] = False  # never seen: kept at weight 1, outside the ranking (its 100 is meaningless)
    generator = torch.Generator().manual_seed(0)
    # 11 known: ceil(0.25 * 11) = 3 highest (9, 8 and the first 7, id 3: ties go to the lower id)
    only_top = top_losses(losses, known, 0.5, generator, keep=0.25, recheck=0.0)
    assert torch.equal(torch.nonzero(only_top).squeeze(1), torch.tensor([1, 3, 6, 11]))
    assert set(only_top.tolist()) == {0.0, 1.0}
    # recheck 0.5 of the other 8: floor(4.0) = 4 of them at random, at weight 1
    weights = top_losses(losses, known, 0.5, generator, keep=0.25, recheck=0.5)
    kept = set(torch.nonzero(weights).squeeze(1).tolist())
    assert {1, 3, 6, 11} <= kept and len(kept) == 8 and set(weights.tolist()) == {0.0, 1.0}
    assert torch.equal(top_losses(losses, known, 0.5, generator, keep=1.0, recheck=0.0), torch.ones(12))
    assert torch.equal(top_losses(losses, torch.zeros(12, dtype=torch.bool), 0.5, generator), torch.ones(12))
    # as a sampler's rule: the defaults by name (ceil(0.25 * 12) = 3 top, floor(0.1 * 9) = 0 re-checked), others bound
    cache = oracle_cache(torch.arange(12, dtype=torch.float32))
    named = PruningSampler(12, cache, epochs=3, rule="top_losses")
    named.set_epoch(1)
    assert sorted(named) == [9, 10, 11]
    assert torch.equal(named.weights(torch.arange(12)), (torch.arange(12) >= 9).float())
    bound = PruningSampler(12, cache, epochs=3, rule=partial(top_losses, keep=0.5, recheck=0.5))
    bound.set_epoch(1)
    assert len(bound) == 6 + 3 and set(range(6, 12)) <= set(bound)


@pytest.mark.parametrize("options", [{"keep": 0.0}, {"keep": 1.5}, {"keep": True}, {"recheck": -0.1},
                                     {"recheck": 1.01}, {"recheck": "0.1"}])  # fmt: skip
def test_top_losses_rejects_shares_out_of_range_naming_them(options):
    name = next(iter(options))
    cache = oracle_cache(torch.arange(8, dtype=torch.float32))
    sampler = PruningSampler(8, cache, epochs=3, rule=partial(top_losses, **options))
    with pytest.raises(ValueError, match=f"top_losses: {name} must be in"):
        sampler.set_epoch(1)


@pytest.mark.parametrize("seed", range(5))
def test_top_losses_rechecks_every_other_sample_with_the_same_chance(seed):
    """Over 2,000 draws each of the 90 samples outside the top 10 is re-checked with probability floor(0.2 * 90) /
    90 = 0.2: every sample's count within 4.5 standard errors of it (a correct rule fails with chance under 1e-3 per
    seed), and the low-loss half's total within 4 of the high-loss half's (no bias by loss)."""
    losses = torch.randperm(100, generator=torch.Generator().manual_seed(seed)).float()
    known = torch.ones(100, dtype=torch.bool)
    generator = torch.Generator().manual_seed(seed)
    draws, share = 2000, 18 / 90
    counts = torch.zeros(100)
    for _ in range(draws):
        counts += top_losses(losses, known, 0.5, generator, keep=0.1, recheck=0.2)
    top = losses >= 90
    assert torch.all(counts[top] == draws) and int(counts.sum()) == draws * 28
    rest = counts[~top]
    se = math.sqrt(draws * share * (1 - share))
    assert float((rest - draws * share).abs().max()) < 4.5 * se
    low, high = rest[losses[~top] < 45].sum(), rest[losses[~top] >= 45].sum()
    half = 45 * draws * share  # each half's expected total; their difference's se: sqrt(2 * 45) * se
    assert abs(float(low - high)) < 4 * math.sqrt(2 * 45) * se and abs(float(low) - half) < 4 * math.sqrt(45) * se


def test_sharding_is_disjoint_equal_and_covers_the_plan():
    cache = oracle_cache(torch.arange(25, dtype=torch.float32))  # mean 12: ids 0..11 below, 6 pruned, 19 kept
    shards = []
    for rank in range(3):
        sampler = PruningSampler(25, cache, epochs=4, num_replicas=3, rank=rank, seed=5, sync_cache=False)
        sampler.set_epoch(1)
        shards.append(list(sampler))
        assert len(shards[-1]) == len(sampler)
    kept = 25 - math.floor(0.5 * 12)  # 19 kept -> padded to 21, 7 per rank
    assert [len(s) for s in shards] == [7, 7, 7]
    flat = [i for s in shards for i in s]
    assert len(set(flat)) == kept
    dropped = PruningSampler(25, cache, epochs=4, num_replicas=3, rank=0, drop_last=True, sync_cache=False)
    dropped.set_epoch(1)
    assert len(dropped) == 6 == len(list(dropped))


def test_resume_is_exact_with_fresh_objects_and_weights_only(tmp_path):
    def run(sampler, cache, epochs, stop=None):
        seen = []
        for epoch in epochs:
            sampler.set_epoch(epoch)
            order = list(sampler)
            seen.append((order, sampler.weights(torch.tensor(order)).tolist()))
            cache.observe(torch.tensor(order), torch.tensor(order, dtype=torch.float32).sin(), epoch)
            if epoch == stop:
                return seen
        return seen

    cache = LossCache(size=50)
    sampler = PruningSampler(50, cache, epochs=6, seed=7)
    whole = run(sampler, cache, range(6))

    cache = LossCache(size=50)
    sampler = PruningSampler(50, cache, epochs=6, seed=7)
    first = run(sampler, cache, range(6), stop=2)  # epoch 2's losses already observed: the plan must not move
    buffer = io.BytesIO()
    torch.save({"sampler": sampler.state_dict(), "cache": cache.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    fresh_cache = LossCache(size=50)
    fresh_cache.load_state_dict(saved["cache"])
    fresh = PruningSampler(50, fresh_cache, epochs=6, seed=7)
    fresh.load_state_dict(saved["sampler"])
    again = list(fresh)  # the saved epoch, replayed
    assert again == first[-1][0]
    rest = run(fresh, fresh_cache, range(3, 6))
    assert first + rest == whole
    with pytest.raises(ValueError, match="prune"):
        PruningSampler(50, LossCache(size=50), epochs=6, seed=7, prune=0.3).load_state_dict(saved["sampler"])


def test_global_rngs_untouched():
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    sampler = PruningSampler(100, oracle_cache(torch.rand(100, generator=torch.Generator().manual_seed(1))), epochs=4)
    for epoch in range(4):
        sampler.set_epoch(epoch)
        list(sampler)
    assert torch.equal(torch.get_rng_state(), states[0])
    assert np.array_equal(np.random.get_state()[1], states[1]) and random.getstate() == states[2]


def test_a_forgotten_set_epoch_warns_once():
    cache = LossCache(size=10)
    sampler = PruningSampler(10, cache, epochs=4)
    list(sampler)
    list(sampler)  # nothing known yet: repeating the plan is right
    cache.observe(torch.arange(10), torch.arange(10.0), 0)
    with pytest.warns(UserWarning, match="set_epoch"):
        assert len(list(sampler)) == 10


def test_validation():
    with pytest.raises(ValueError, match="dense LossCache"):
        PruningSampler(10, LossCache(capacity=10), epochs=2)
    with pytest.raises(ValueError, match="dense LossCache"):
        PruningSampler(10, LossCache(size=11), epochs=2)
    with pytest.raises(ValueError, match="prune"):
        PruningSampler(10, LossCache(size=10), epochs=2, prune=1.0)
    with pytest.raises(ValueError, match="epochs"):
        PruningSampler(10, LossCache(size=10), epochs=0)
    with pytest.raises(ValueError, match="rule must be one of"):
        PruningSampler(10, LossCache(size=10), epochs=2, rule="largest")
    with pytest.raises(ValueError, match="init_process_group"):
        PruningSampler(10, LossCache(size=10), epochs=2, num_replicas=2, rank=1)
    with pytest.raises(ValueError, match="dense"):
        LossCache(capacity=4).dense_entries()
    everything = PruningSampler(4, oracle_cache(torch.arange(4.0)), epochs=4, rule=lambda losses, *_: losses * 0)
    with pytest.raises(ValueError, match="pruned all 4 samples"):
        everything.set_epoch(1)


def _data(n=96):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g))


def test_dataloader_with_two_workers_loads_exactly_the_plan():
    dataset = _data()
    cache = LossCache(size=len(dataset))
    sampler = PruningSampler(dataset, cache, epochs=4, seed=2)
    loader = DataLoader(with_index(dataset), batch_size=16, sampler=sampler, num_workers=2)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        plan, ids = list(sampler), []
        for x, _, index in loader:
            sampler.observe(index, (x.sum(1) - x.sum(1).min()).float())  # an oracle "loss"
            assert torch.equal(sampler.weights(index), sampler.weights(index.tolist()))
            ids += index.tolist()
        assert ids == plan and len(ids) == len(sampler)
    assert len(ids) < len(dataset)


def test_composes_with_sbloader_on_one_cache():
    torch.manual_seed(0)
    dataset = _data()
    model = nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cache = LossCache(staleness=2, size=len(dataset))
    sampler = PruningSampler(dataset, cache, epochs=4, seed=1)
    loader = SBLoader(
        DataLoader(with_index(dataset), batch_size=16, sampler=sampler), model, F.cross_entropy, keep=0.5,
        cache=cache, id_key=-1,
    )  # fmt: skip
    for epoch in range(4):
        loader.set_epoch(epoch)  # reaches the sampler
        plan, trained = set(sampler), set()
        for x, y, index in loader:
            losses = F.cross_entropy(model(x), y, reduction="none")
            loader.observe((x, y, index), losses)  # the one observe() line feeds both
            (sampler.weights(index) * losses).mean().backward()
            opt.step()
            opt.zero_grad()
            trained |= set(index.tolist())
        assert trained <= plan and len(trained) < len(plan)  # SB keeps half of each pruned epoch's batch
        if epoch in (1, 2):
            assert len(plan) < len(dataset)
    assert len(cache) == len(dataset)


def prune_on_rank(rank: int, *, refresh: str) -> list[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """On one of 2 gloo ranks: each epoch's shard and the merged cache's (losses, measure times) before observing."""
    cache = LossCache(size=41, refresh=refresh)
    sampler = PruningSampler(41, cache, epochs=4, seed=9)
    record = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        shard = list(sampler)
        record.append((shard, cache.dense_entries()[0].clone(), cache.dense_entries()[1].clone()))
        ids = torch.tensor(shard)
        sampler.observe(ids, ids.float().cos() + rank * 0.001 * (ids == 0))  # id 0 differs between ranks
    return record


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.parametrize("refresh", ["observed", "scored"])
def test_two_gloo_ranks_disjoint_equal_shards_and_one_cache(refresh):
    # Merged entries carry their measure time in either refresh: the ranks' times agree too.
    records = launch_ranks(prune_on_rank, world=2, timeout=120, refresh=refresh)  # 120 s: a hang guard only
    for epoch in range(3):
        (shard0, loss0, when0), (shard1, loss1, when1) = records[0][epoch], records[1][epoch]
        assert len(shard0) == len(shard1)
        assert torch.equal(loss0, loss1) and torch.equal(when0, when1)  # the merged cache is the same on both
        kept = set(shard0) | set(shard1)
        assert len(shard0) + len(shard1) - len(kept) <= 1  # each planned index on one rank, but the one padding index
        assert len(set(shard0) & set(shard1)) <= 1  # disjoint but for the one padding index (odd plans)
    assert len(records[0][0][0]) == 21  # epoch 0: all 41 kept, padded to 42
    observed_in_1 = sorted(set(records[0][1][0]) | set(records[1][1][0]))
    assert len(observed_in_1) < 41  # epoch 1 pruned from the merged cache
    assert (records[0][2][2][observed_in_1] == 1).all()  # the sampler's observations are its measurements
    ids = torch.arange(41)
    assert torch.allclose(records[0][2][1][1:], ids[1:].float().cos())  # every rank saw every rank's losses


def test_a_warm_cache_prunes_from_the_new_runs_first_epoch():
    losses = torch.arange(20, dtype=torch.float32)  # mean 9.5: ids 0..9 are below it
    earlier = oracle_cache(losses)
    earlier.observe(torch.arange(20), losses, 6)  # measured at the earlier run's epoch 6
    warm = LossCache(size=20)
    warm.warm_start(earlier.state_dict())
    sampler = PruningSampler(20, warm, epochs=8, prune=0.5, seed=3)
    sampler.set_epoch(0)
    kept = sorted(sampler)
    assert len(kept) == 15 and set(range(10, 20)) <= set(kept)  # as from a cache filled in this run
    cold = PruningSampler(20, LossCache(size=20), epochs=8, prune=0.5, seed=3)
    cold.set_epoch(0)
    assert sorted(cold) == list(range(20))  # nothing known: nothing pruned
