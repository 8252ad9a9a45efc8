import numpy as np
import pytest
import torch
from torch import nn

from sbdata import HistoryPercentile, RandomK, SBLoader, Schedule, SelectionEngine
from tests.helpers import OracleModel, ce, ids_of, oracle_batch

LOSSES = [0.3, 2.5, 0.1, 1.7, 0.9, 3.2, 0.4, 2.2, 1.1, 0.6, 2.9, 0.2, 1.4, 0.8, 2.0, 0.5]


def stream(n_samples: int, batch: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    order = torch.randperm(n_samples, generator=torch.Generator().manual_seed(seed)).tolist()
    return [oracle_batch(order[i : i + batch]) for i in range(0, n_samples, batch)]


def uniform_table(n: int, seed: int = 0) -> list[float]:
    return (np.random.default_rng(seed).random(n) * 0.99 + 0.01).tolist()


POLICIES = ["topk", "rank", "random", lambda: HistoryPercentile(history=64)]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("interrupt", [0, 3])
def test_fixed_size_batches_over_an_epoch(policy, interrupt):
    table = uniform_table(200)
    batches = stream(200, 10)
    out_size, in_size = 8, 10
    sb = SBLoader(
        batches,
        OracleModel(table),
        ce,
        keep=0.3,
        policy=policy() if callable(policy) else policy,
        batch_size=out_size,
        schedule=Schedule(interrupt=interrupt),
    )
    sizes, seen = [], []
    for out in sb:
        sizes.append(len(ids_of(out)))
        seen.extend(ids_of(out))
        assert sb.engine.held_samples <= out_size + in_size  # the pool bound
    plain = [len(ids_of(b)) for i, b in enumerate(batches) if interrupt and (i + 1) % interrupt == 0]
    sb_sizes = [s for s in sizes if s != in_size] if interrupt else sizes
    assert all(size == out_size for size in sb_sizes[:-1]), sizes
    assert 0 < sb_sizes[-1] <= out_size
    assert len(seen) == len(set(seen))  # no sample twice in an epoch
    assert set(seen) <= set(range(200))  # every sample came from the candidates
    assert sizes.count(in_size) >= len(plain)  # plain steps pass whole loader batches


def test_fixed_size_topk_keeps_the_expected_samples_across_batches():
    batches = [oracle_batch(range(0, 8)), oracle_batch(range(8, 16))]
    outs = list(SBLoader(batches, OracleModel(LOSSES), ce, keep=0.5, batch_size=3))
    # top half of ids 0-7: 1, 3, 5, 7; of ids 8-15: 8, 10, 12, 14 -> emitted in arrival order, 3 at a time
    assert [ids_of(o) for o in outs] == [[1, 3, 5], [7, 8, 10], [12, 14]]


def test_drop_last_drops_the_short_tail():
    batches = [oracle_batch(range(0, 8)), oracle_batch(range(8, 16))]
    outs = list(SBLoader(batches, OracleModel(LOSSES), ce, keep=0.5, batch_size=3, drop_last=True))
    assert [ids_of(o) for o in outs] == [[1, 3, 5], [7, 8, 10]]


def test_history_keeps_higher_losses_in_the_predicted_proportions():
    table = uniform_table(20000, seed=1)
    sb = SBLoader(
        stream(20000, 100, seed=2), OracleModel(table), ce, keep=1 / 3, policy=HistoryPercentile(history=2048)
    )
    kept = {i for out in sb for i in ids_of(out)}
    losses = np.asarray(table)
    warm = stream(20000, 100, seed=2)[40:]  # skip the batches that fill the history
    ids = np.asarray([i for batch in warm for i in ids_of(batch)])
    was_kept = np.isin(ids, list(kept))
    predicted = ((losses[ids] - 0.01) / 0.99) ** 2  # pct ~ CDF of U(0.01, 1); beta = 1/keep - 1 = 2
    for low, high in [(0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.0)]:
        in_bin = (losses[ids] >= low) & (losses[ids] < high)
        assert abs(was_kept[in_bin].mean() - predicted[in_bin].mean()) < 0.03, (low, high)
    assert abs(was_kept.mean() - 1 / 3) < 0.02  # 1 / (beta + 1)


@pytest.mark.parametrize("policy", ["rank", "random", lambda: HistoryPercentile(history=16, min_prob=0.05)])
def test_weights_are_unbiased_for_the_candidate_mean(policy):
    # (w * loss).sum() over a yielded subset must average to the candidates' mean loss over many seeded draws.
    batch = oracle_batch(range(16))
    estimates = []
    for seed in range(3000):
        engine = SelectionEngine(
            OracleModel(LOSSES), ce, policy=policy() if callable(policy) else policy, generator=seed,
            return_weights=True, **({"keep": 0.25} if isinstance(policy, str) else {}),
        )  # fmt: skip
        subset, weights = engine.process(batch)
        estimates.append(float((weights * torch.tensor(LOSSES)[ids_of(subset)]).sum()))
    estimates = np.asarray(estimates)
    standard_error = estimates.std() / np.sqrt(len(estimates))
    # tolerance: 4 standard errors of the Monte Carlo mean
    assert abs(estimates.mean() - np.mean(LOSSES)) < 4 * standard_error + 1e-6


def test_pooled_weights_random_are_exactly_one_over_batch_size():
    sb = SBLoader(stream(64, 16), OracleModel(uniform_table(64)), ce, keep=0.5, policy="random",
                  batch_size=4, return_weights=True)  # fmt: skip
    for batch, weights in sb:
        assert torch.allclose(weights, torch.full((len(ids_of(batch)),), 0.25))


def test_pooled_weights_sum_to_one_on_average_for_rank():
    # Each kept sample carries expected/prob, whose mean over the kept stream is 1 (Horvitz-Thompson with
    # value 1), so a full batch of 10 weighs 1 on average.
    sb = SBLoader(stream(20000, 40), OracleModel(uniform_table(20000)), ce, keep=0.25, policy="rank",
                  batch_size=10, return_weights=True, drop_last=True)  # fmt: skip
    sums = np.asarray([float(weights.sum()) for _, weights in sb])
    standard_error = sums.std() / np.sqrt(len(sums))
    assert abs(sums.mean() - 1.0) < 4 * standard_error  # tolerance: 4 standard errors


def test_plain_steps_weigh_every_sample_equally():
    sb = SBLoader([oracle_batch(range(4))], OracleModel(LOSSES), ce, policy="rank", return_weights=True,
                  schedule=Schedule(interrupt=1))  # fmt: skip
    ((_, weights),) = list(sb)
    assert torch.equal(weights, torch.full((4,), 0.25))


def test_weights_with_topk_is_a_clear_error():
    with pytest.raises(ValueError, match="deterministic.*no unbiased weight"):
        SBLoader([], OracleModel(LOSSES), ce, return_weights=True)


def test_weights_with_history_need_a_floor():
    with pytest.raises(ValueError, match="min_prob=0.05"):
        SBLoader([], OracleModel(LOSSES), ce, policy="history", return_weights=True)


def test_nan_raise_names_the_positions():
    table = list(LOSSES)
    table[2] = table[5] = float("nan")
    with pytest.raises(ValueError, match=r"non-finite loss at batch positions \[2, 5\] of loader batch 0.*'drop'"):
        list(SBLoader([oracle_batch(range(8))], OracleModel(table), ce))


def test_nan_drop_never_keeps_them_and_keep_treats_them_as_hardest():
    table = list(LOSSES)
    table[0] = table[2] = float("nan")
    (dropped,) = list(SBLoader([oracle_batch(range(8))], OracleModel(table), ce, keep=0.5, nan_policy="drop"))
    assert ids_of(dropped) == [1, 5, 7]  # ceil(0.5 * 6 finite) of ids 1, 3, 4, 5, 6, 7
    (kept,) = list(SBLoader([oracle_batch(range(8))], OracleModel(table), ce, keep=0.5, nan_policy="keep"))
    assert ids_of(kept) == [0, 1, 2, 5]


def test_nan_drop_with_nothing_finite_yields_nothing():
    table = [float("nan")] * 4
    sb = SBLoader([oracle_batch(range(4))], OracleModel(table), ce, nan_policy="drop")
    assert list(sb) == []
    assert sb.stats.samples_scored == 4 and sb.stats.samples_kept == 0


def test_stats_report_exact_counts_and_means():
    batches = [oracle_batch(range(8)), oracle_batch(range(8, 16))]
    sb = SBLoader(batches, OracleModel(LOSSES), ce, keep=0.25, schedule=Schedule(interrupt=2))
    list(sb)
    stats = sb.stats
    assert (stats.steps, stats.sb_steps, stats.samples_seen, stats.samples_scored) == (2, 1, 16, 8)
    assert (stats.samples_kept, stats.samples_yielded) == (2, 10)
    assert stats.mean_loss_kept == pytest.approx((3.2 + 2.5) / 2)
    assert stats.mean_loss_dropped == pytest.approx((0.3 + 0.1 + 1.7 + 0.9 + 0.4 + 2.2) / 6)
    assert stats.backprop_fraction == pytest.approx(10 / 16)
    assert set(stats.postfix()) == {"bp", "kept_loss", "dropped_loss"} and stats.scoring_seconds > 0


def test_model_moved_after_construction_is_reported():
    model = OracleModel(LOSSES)
    engine = SelectionEngine(model, ce)
    model.to("meta")
    with pytest.raises(RuntimeError, match="model moved"):
        engine.push(oracle_batch(range(4)))


def test_generator_on_the_wrong_device_is_refused():
    with pytest.raises(ValueError, match="torch.Generator"):
        SelectionEngine(OracleModel(LOSSES), ce, device="meta", generator=torch.Generator())


def test_batch_without_batch_fields_is_an_error():
    with pytest.raises(ValueError, match="no field with a batch dimension"):
        list(SBLoader([{"lr": 0.1}], OracleModel(LOSSES), ce))


def test_disagreeing_batch_is_an_error():
    x, y = oracle_batch(range(4))
    with pytest.raises(ValueError, match="disagree on the batch size"):
        list(SBLoader([(x, y[:3])], OracleModel(LOSSES), ce))


def test_unsplittable_batch_is_an_error():
    x, y = oracle_batch(range(4))
    with pytest.raises(ValueError, match="cannot take .inputs, targets. apart.*split="):
        list(SBLoader([{"x": x, "y": y}], OracleModel(LOSSES), ce))


def test_missing_id_key_is_an_error():
    x, y = oracle_batch(range(4))
    with pytest.raises(ValueError, match=r"id_key='index' is not in the batch \(\['input', 'target'\]\)"):
        list(SBLoader([{"input": x, "target": y}], OracleModel(LOSSES), ce, id_key="index"))


def test_pooled_state_cannot_load_into_unpooled_engine():
    pooled = SelectionEngine(OracleModel(LOSSES), ce, batch_size=4)
    with pytest.raises(ValueError, match="batch_size"):
        SelectionEngine(OracleModel(LOSSES), ce).load_state_dict(pooled.state_dict())


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"keep": 0}, ValueError, r"keep must be in \(0, 1\].*got 0"),
        ({"keep": 1.5}, ValueError, r"keep must be in \(0, 1\].*got 1.5"),
        ({"keep": True}, ValueError, r"keep must be in \(0, 1\]"),
        ({"keep": "half"}, ValueError, r"keep must be in \(0, 1\]"),
        ({"policy": "biggest-losers"}, ValueError, "unknown policy 'biggest-losers'"),
        ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1"),
        ({"drop_last": True}, ValueError, "drop_last=True applies to the pooled path"),
        ({"nan_policy": "ignore"}, ValueError, "nan_policy must be one of"),
        ({"generator": "seed"}, TypeError, "generator must be a torch.Generator"),
        ({"schedule": 0.5}, TypeError, "schedule must be a sbdata.Schedule"),
        ({"split": "xy"}, TypeError, "split must be callable"),
        ({"id_key": 1.5}, TypeError, "id_key must be"),
        ({"policy": HistoryPercentile(beta=1.0), "keep": 0.3}, ValueError, "pass one of them"),
    ],
)
def test_construction_errors(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        SelectionEngine(OracleModel(LOSSES), ce, **kwargs)


def test_model_must_be_a_module():
    with pytest.raises(TypeError, match="model must be the torch.nn.Module"):
        SelectionEngine(lambda x: x, ce)


def test_parameter_free_model_scores_on_cpu():
    class Fixed(nn.Module):
        def forward(self, x):
            return torch.stack([torch.zeros(len(x)), x[:, 0]], 1)

    engine = SelectionEngine(Fixed(), ce, policy=RandomK())
    assert engine.device == torch.device("cpu")
    subset = engine.process(oracle_batch(range(4)))
    assert len(ids_of(subset)) == 2


def test_nan_raise_reads_its_flag_late_but_always_reports_it(monkeypatch):
    """On CUDA the flag is read once it reaches the host: later steps may run first, the epoch's end waits."""
    from sbdata.batch import HostCopy

    monkeypatch.setattr(HostCopy, "ready", lambda self: False)  # a device that never lands a copy by itself
    table = list(LOSSES)
    table[9] = float("nan")
    sb = SBLoader([oracle_batch(range(8)), oracle_batch(range(8, 16))], OracleModel(table), ce)
    outputs = iter(sb)
    assert len(next(outputs)[1]) == 4 and len(next(outputs)[1]) == 4  # both yielded while the flags are in flight
    with pytest.raises(ValueError, match=r"non-finite loss at batch positions \[1\] of loader batch 1"):
        next(outputs)
    sb = SBLoader([oracle_batch(range(8, 16))], OracleModel(table), ce)
    next(iter(sb))
    with pytest.raises(ValueError, match="loader batch 0"):
        sb.state_dict()  # a checkpoint never hides it either


def test_nan_raise_flag_overflowing_to_inf_on_finite_scores_raises_nothing_and_later_groups_are_still_checked():
    """The group flag is the finite-ness of the scores' sum: a sum overflowing on finite scores makes the check
    look at the scores themselves, finds nothing, and leaves the groups in flight to be checked."""
    from sbdata.batch import HostCopy
    from sbdata.engine._finite import CHECK_EVERY, FiniteCheck

    check = FiniteCheck()
    huge = torch.full((4,), 3e38)  # finite in float32; their sum is not
    for step in range(CHECK_EVERY):
        check.add(huge, step)  # read at once on the CPU: no error
    original_ready = HostCopy.ready
    try:
        HostCopy.ready = lambda self: False  # keep the next groups in flight
        for step in range(CHECK_EVERY, 2 * CHECK_EVERY):
            check.add(huge, step)
        for step in range(2 * CHECK_EVERY, 3 * CHECK_EVERY):
            check.add(torch.tensor([1.0, float("nan") if step == 2 * CHECK_EVERY + 3 else 2.0]), step)
    finally:
        HostCopy.ready = original_ready
    with pytest.raises(ValueError, match=r"positions \[1\] of loader batch 19"):
        check.settle()
