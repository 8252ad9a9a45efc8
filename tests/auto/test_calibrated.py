"""The calibrated cost model the examples and the benchmarks share: known answers from fixed seconds (no clock)."""

import pytest
import torch
from torch import nn

from sbdata.auto import Costs, calibration_calls, costs_from, sb_step_seconds


def test_the_calls_are_named_by_kind_and_size_and_leave_the_callers_model_alone():
    x, y = torch.randn(16, 3), torch.randint(0, 2, (16,))
    calls = calibration_calls(lambda: nn.Linear(3, 2), x, y, train_sizes=[8, 4], score_sizes=[16], engine_batch=8,
                              engine_steps={"topk": lambda: None})  # fmt: skip
    assert list(calls) == ["data 4", "data 8", "train 4", "train 8", "score 8", "score 16", "engine topk"]
    for call in calls.values():
        call()
    with pytest.raises(ValueError, match="engine_steps without engine_batch"):
        calibration_calls(nn.Identity, x, y, train_sizes=[8], score_sizes=[8], engine_steps={"topk": lambda: None})


def test_costs_from_fixed_seconds_price_an_sb_step():
    seconds = {"data 64": 0.1, "train 64": 2.0, "train 16": 0.8, "score 64": 0.5, "score 32": 0.3, "engine sb": 0.7}
    costs = costs_from(seconds, engine_batch=64)
    assert costs == Costs(
        data={64: 0.1}, train={64: 2.0, 16: 0.8}, score={64: 0.5, 32: 0.3}, overhead={"sb": 0.7 - 0.5}
    )
    assert Costs.from_dict(costs.as_dict()) == costs and costs.plain_step(64) == 2.1
    # data 0.1 + score[64] 0.5 + overhead 0.2 + train[16] 0.8; pooled: 16/64 of train[64]
    assert sb_step_seconds(costs, 64, 16, overhead="sb") == pytest.approx(1.6)
    assert sb_step_seconds(costs, 64, 16, overhead="sb", fixed=True) == pytest.approx(0.1 + 0.5 + 0.2 + 0.5)
    # a cache: half the steps score 32 samples, half nothing; score[48] interpolates between 32 and 64
    assert sb_step_seconds(costs, 64, 16, overhead="sb", scored={32: 0.5, 0: 0.5}) == pytest.approx(0.1 + 0.15 + 1.0)
