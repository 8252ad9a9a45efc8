"""sbdata.advice: known spreads and fixed cost tables give known advice; the user's model and RNGs are untouched."""

import math

import pytest
import torch

from sbdata import CostTable, advise
from sbdata.advice import Candidates, Measurement, Training
from sbdata.auto import small_batch_speedup
from sbdata.auto._gain import shrink_speedup
from tests.helpers import OracleModel, ce, oracle_batch

FE = CostTable.forward_equivalents()


def loader(table, batch=16, batches=8):
    return [oracle_batch(range(i * batch, (i + 1) * batch)) for i in range(batches)]


def test_a_flat_spread_prices_every_option_as_a_range_and_says_measure_it():
    table = [1.0] * 128
    advice = advise(loader(table), OracleModel(table), ce, measurement=Measurement(steps=8, costs=FE))
    assert advice.tau == pytest.approx(1.0) and advice.batch == 16 and advice.batches_per_epoch == 8
    assert advice.steps == 8
    assert advice.rows[0] == {"option": "no selection", "keep": 1.0, "cache": False, "low": 1.0, "high": 1.0,
                              "seconds_per_epoch": 8 * 3 * 16}  # fmt: skip
    keep_half = next(r for r in advice.rows if r["option"] == "keep=0.5")
    assert keep_half["low"] == pytest.approx(shrink_speedup(1.0, 0.5, 16, FE))  # noise-dominated
    assert keep_half["high"] == pytest.approx(48 / (16 + 24))  # above the critical batch: the seconds alone
    assert keep_half["seconds_per_epoch"] == pytest.approx(8 * (16 + 3 * 8))
    cached = next(r for r in advice.rows if r["option"] == "keep=0.5 + LossCache(staleness=2)")
    assert cached["low"] == pytest.approx(shrink_speedup(1.0, 0.5, 16, FE, reuse=2 / 3))
    smaller = next(r for r in advice.rows if r["option"] == "smaller batch 4 (no selection)")
    assert (smaller["low"], smaller["high"]) == pytest.approx((1.0, 4.0))  # FE has no fixed cost
    assert smaller["low"] == pytest.approx(small_batch_speedup(0.25, 16, FE))
    assert smaller["seconds_per_epoch"] == pytest.approx(8 * 3 * 16)  # the same samples, in 4 steps of 4
    assert advice.recommendation.startswith(
        "measure it: keep=0.75 + LossCache(staleness=2) is predicted between 0.86x and 1.16x the speed of whole batches"
    )
    assert "the losses are nearly alike (tau 1.00)" in advice.recommendation
    assert "keep='auto' tries it on your run" in advice.recommendation
    assert advice.recommendation.endswith(
        "smaller batch 4 (no selection) is predicted 1.00x to 4.00x (retune its learning rate); no branch trial: pass "
        "Training(optimizer=<your optimizer>) to measure the options"
    )
    assert advice.choice == "keep=0.75 + LossCache(staleness=2)"
    text = str(advice)
    assert "timed 8 batches of 16" in text and "predicted speed against training on whole batches" in text
    assert "worst" in text.splitlines()[2] and "best" in text.splitlines()[2]


def test_expensive_scoring_advises_whole_batches_even_at_the_high_end():
    table = [1.0] * 128
    dear = CostTable(score_per_sample=4.0, train_per_sample=3.0)
    advice = advise(
        loader(table),
        OracleModel(table),
        ce,
        candidates=Candidates(staleness=0),
        measurement=Measurement(steps=8, costs=dear),
    )
    assert advice.recommendation.startswith("train on whole batches: even if only seconds counted")
    assert advice.choice == "no selection"


def test_a_concentrated_spread_with_cheap_scoring_advises_selection():
    # one sample in 16 carries almost all the loss: tau = sqrt(16 * (20^2 + 15 * 0.01^2)) / (20 + 0.15) ~ 4
    table = [20.0 if i % 16 == 0 else 0.01 for i in range(128)]
    cheap = CostTable(score_per_sample=0.1, train_per_sample=3.0)
    advice = advise(
        loader(table),
        OracleModel(table),
        ce,
        candidates=Candidates(keeps=(0.25, 0.5)),
        measurement=Measurement(steps=8, costs=cheap),
    )
    losses = torch.tensor(table[:16])
    assert advice.tau == pytest.approx(math.sqrt((losses**2).mean().item()) / losses.mean().item(), rel=1e-4)
    selection = [r for r in advice.rows[1:] if not r["option"].startswith("smaller")]
    best = max(selection, key=lambda r: (r["low"], r["high"]))
    assert best["low"] > 1.05 and advice.recommendation.startswith(f"select: {best['option']}")
    assert advice.choice == best["option"]


def test_default_steps_fit_a_short_loader_and_are_reported():
    table = [1.0] * 128
    advice = advise(loader(table, batches=6), OracleModel(table), ce, measurement=Measurement(costs=FE))
    assert advice.steps == 6
    with pytest.raises(ValueError, match="at least 4 loader batches to measure; this loader has 3"):
        advise(loader(table, batches=3), OracleModel(table), ce, measurement=Measurement(costs=FE))


def test_a_loader_whose_len_raises_is_measured_as_a_stream():
    class Stream(torch.utils.data.IterableDataset):  # a DataLoader over it has __len__ that raises TypeError
        def __iter__(self):
            return iter(zip(*oracle_batch(range(128)), strict=True))

    table = [1.0] * 128
    data = torch.utils.data.DataLoader(Stream(), batch_size=16)  # 8 batches, but no length to say so
    with pytest.raises(ValueError, match=r"the loader ended after 8 batches: pass Measurement\(steps=<at most 8>\)"):
        advise(
            data, OracleModel(table), ce, measurement=Measurement(costs=FE)
        )  # a stream: the default 32 steps, refused naming the fix
    advice = advise(data, OracleModel(table), ce, measurement=Measurement(costs=FE, steps=8))
    assert advice.steps == 8 and advice.batches_per_epoch is None
    assert all(row["seconds_per_epoch"] is None for row in advice.rows)


def test_the_users_optimizer_is_copied_with_its_state_and_left_alone():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    data = [(torch.randn(32, 4), torch.randint(0, 3, (32,))) for _ in range(6)]
    user = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 1e-2}, {"params": model[2].parameters()}],
                             lr=1e-3)  # fmt: skip
    for x, y in data[:2]:
        user.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        user.step()
    before = {k: v for k, v in user.state_dict().items()}
    saved = [{k: v.clone() for k, v in state.items()} for state in user.state.values()]
    ticks = iter(range(10_000))
    advice = advise(
        data,
        model,
        torch.nn.functional.cross_entropy,
        training=Training(optimizer=user),
        measurement=Measurement(steps=4, clock=lambda: float(next(ticks))),
    )
    assert advice.steps == 4
    assert user.state_dict()["param_groups"] == before["param_groups"]
    assert all(torch.equal(a, b) for old, new in zip(saved, user.state.values(), strict=True)
               for a, b in zip(old.values(), new.values(), strict=True))  # fmt: skip
    from sbdata.advice._settings import copy_optimizer as _copy_optimizer

    copy_ = __import__("copy").deepcopy(model)
    clone = _copy_optimizer(user, model, copy_)
    assert type(clone) is torch.optim.AdamW and [g["lr"] for g in clone.param_groups] == [1e-2, 1e-3]
    assert [p is q for p, q in zip(clone.param_groups[0]["params"], copy_[0].parameters(), strict=True)] == [True] * 2
    first = next(iter(clone.state.values()))
    assert torch.equal(first["exp_avg"], next(iter(user.state.values()))["exp_avg"]) and first["step"] == 2
    with pytest.raises(ValueError, match=r"pass Training\(make_optimizer=\) or Training\(optimizer=\), not both"):
        advise(
            data,
            model,
            torch.nn.functional.cross_entropy,
            training=Training(optimizer=user, make_optimizer=lambda m: user),
            measurement=Measurement(steps=4),
        )
    stranger = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"Training\(optimizer=\) holds 2 parameter\(s\) that are not the model's"):
        advise(
            data,
            model,
            torch.nn.functional.cross_entropy,
            training=Training(optimizer=stranger),
            measurement=Measurement(steps=4),
        )


def test_the_users_model_optimizer_and_rngs_are_untouched():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 3)).train()
    before = [p.detach().clone() for p in model.parameters()]
    data = [(torch.randn(32, 4), torch.randint(0, 3, (32,))) for _ in range(6)]
    state = torch.get_rng_state()
    make = lambda m: torch.optim.SGD(m.parameters(), lr=10.0)  # noqa: E731 - a large step, on the copy only
    ticks = iter(range(10_000))  # a fixed clock: what is asserted never depends on a measured time
    loss = torch.nn.functional.cross_entropy
    advice = advise(
        data,
        model,
        loss,
        training=Training(make_optimizer=make),
        measurement=Measurement(steps=6, clock=lambda: float(next(ticks))),
    )
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)) and model.training
    assert torch.equal(torch.get_rng_state(), state) and all(p.grad is None for p in model.parameters())
    assert advice.costs.train(32) > 0 and advice.rows[0]["seconds_per_epoch"] == pytest.approx(
        6 * advice.costs.train(32)
    )


def test_a_fixed_clock_gives_a_fixed_cost_table():
    ticks = iter(range(10_000))
    table = [1.0] * 128
    advice = advise(
        loader(table), OracleModel(table), ce, measurement=Measurement(steps=8, clock=lambda: float(next(ticks)))
    )
    assert advice.costs.score(16) == pytest.approx(1.0) and advice.costs.train(4) == pytest.approx(1.0)  # 1 tick each


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Measurement(steps=3), "steps must be an int >= 4"),
        (lambda: Candidates(keeps=(0.5, 1.5)), r"keeps must be shares in \(0, 1\]"),
        (lambda: Candidates(staleness=-1), "staleness must be an int >= 0"),
        (lambda: Candidates(score="grad"), "score must be one of"),
    ],
)
def test_bad_settings_are_refused_when_built_naming_the_fix(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_a_loader_shorter_than_the_steps_is_refused_naming_the_fix():
    table = [1.0] * 128
    with pytest.raises(ValueError, match=r"the loader ended after 8 batches: pass Measurement\(steps=<at most 8>\)"):
        advise(loader(table), OracleModel(table), ce, measurement=Measurement(steps=9, costs=FE))
