"""sbdata.advice: known spreads and fixed cost tables give known advice; the user's model and RNGs are untouched."""

import math

import pytest
import torch

from sbdata import CostTable, advise
from sbdata.auto import shrink_speedup
from tests.helpers import OracleModel, ce, oracle_batch

FE = CostTable.forward_equivalents()


def loader(table, batch=16, batches=8):
    return [oracle_batch(range(i * batch, (i + 1) * batch)) for i in range(batches)]


def test_a_flat_spread_advises_whole_batches_in_numbers():
    table = [1.0] * 128
    advice = advise(loader(table), OracleModel(table), ce, steps=8, costs=FE)
    assert advice.tau == pytest.approx(1.0) and advice.batch == 16 and advice.batches_per_epoch == 8
    assert advice.rows[0] == {"option": "no selection", "keep": 1.0, "cache": False, "speedup": 1.0,
                              "seconds_per_epoch": 8 * 3 * 16}  # fmt: skip
    keep_half = next(r for r in advice.rows if r["option"] == "keep=0.5")
    assert keep_half["speedup"] == pytest.approx(shrink_speedup(1.0, 0.5, 16, FE))  # (1/3) * 48 / 40 = 0.4
    assert keep_half["seconds_per_epoch"] == pytest.approx(8 * (16 + 3 * 8))
    cached = next(r for r in advice.rows if r["option"] == "keep=0.5 + LossCache(staleness=2)")
    assert cached["speedup"] == pytest.approx(shrink_speedup(1.0, 0.5, 16, FE, reuse=2 / 3))
    assert advice.recommendation.startswith("train on whole batches") and "tau 1.00" in advice.recommendation
    assert "spread is flat" in advice.recommendation and "keep=0.5" in str(advice)


def test_a_concentrated_spread_with_cheap_scoring_advises_selection():
    # one sample in 16 carries almost all the loss: tau = sqrt(16 * (20^2 + 15 * 0.01^2)) / (20 + 0.15) ~ 4
    table = [20.0 if i % 16 == 0 else 0.01 for i in range(128)]
    cheap = CostTable(score_per_sample=0.1, train_per_sample=3.0)
    advice = advise(loader(table), OracleModel(table), ce, steps=8, costs=cheap, keeps=(0.25, 0.5))
    losses = torch.tensor(table[:16])
    assert advice.tau == pytest.approx(math.sqrt((losses**2).mean().item()) / losses.mean().item(), rel=1e-4)
    best = max(advice.rows[1:], key=lambda r: r["speedup"])
    assert best["speedup"] > 1.05 and advice.recommendation.startswith(f"select: {best['option']}")


def test_the_users_model_optimizer_and_rngs_are_untouched():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 3)).train()
    before = [p.detach().clone() for p in model.parameters()]
    data = [(torch.randn(32, 4), torch.randint(0, 3, (32,))) for _ in range(6)]
    state = torch.get_rng_state()
    make = lambda params: torch.optim.SGD(params, lr=10.0)  # noqa: E731 - a large step, on the copy only
    ticks = iter(range(10_000))  # a fixed clock: what is asserted never depends on a measured time
    loss = torch.nn.functional.cross_entropy
    advice = advise(data, model, loss, steps=6, make_optimizer=make, clock=lambda: float(next(ticks)))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)) and model.training
    assert torch.equal(torch.get_rng_state(), state) and all(p.grad is None for p in model.parameters())
    assert advice.costs.train(32) > 0 and advice.rows[0]["seconds_per_epoch"] == pytest.approx(
        6 * advice.costs.train(32)
    )


def test_a_fixed_clock_gives_a_fixed_cost_table():
    ticks = iter(range(10_000))
    table = [1.0] * 128
    advice = advise(loader(table), OracleModel(table), ce, steps=8, clock=lambda: float(next(ticks)))
    assert advice.costs.score(16) == pytest.approx(1.0) and advice.costs.train(4) == pytest.approx(1.0)  # 1 tick each


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": 3}, "steps must be an int >= 4"),
        ({"keeps": (0.5, 1.5)}, r"keeps must be shares in \(0, 1\]"),
        ({"staleness": -1}, "staleness must be an int >= 0"),
        ({"steps": 9}, "the loader ended after 8 batches: pass steps <= 8"),
    ],
)
def test_bad_arguments_are_refused_naming_the_fix(kwargs, message):
    table = [1.0] * 128
    with pytest.raises(ValueError, match=message):
        advise(loader(table), OracleModel(table), ce, costs=FE, **kwargs)
