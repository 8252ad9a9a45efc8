import numpy as np
import pytest
import torch

from sbdata import HistoryPercentile, SBLoader
from tests.helpers import OracleModel, ce, oracle_batch


def seeded(seed: int) -> torch.Generator:
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


def brute_force_percentiles(remembered: list[float], scores: list[float]) -> list[float]:
    return [sum(1 for r in remembered if r < s) / len(remembered) for s in scores]


def test_percentiles_equal_brute_force_with_wraparound():
    policy, gen = HistoryPercentile(history=7), seeded(0)
    stream: list[float] = []
    rng = np.random.default_rng(0)
    for size in (3, 4, 5, 9, 2):
        scores = rng.random(size).round(2).tolist()  # rounding makes ties
        policy.select(torch.tensor(scores), 0.5, gen)
        stream.extend(scores)
        remembered = stream[-7:]
        probe = [0.0, 0.25, 0.5, 0.75, 1.0, *scores]
        got = policy.percentiles(torch.tensor(probe)).tolist()
        np.testing.assert_allclose(got, brute_force_percentiles(remembered, probe), atol=1e-6)


def test_keep_probability_formula_with_min_prob():
    policy = HistoryPercentile(history=4, beta=2.0, min_prob=0.1)
    policy.select(torch.tensor([1.0, 2.0, 3.0, 4.0]), 0.5, seeded(0))
    pct = policy.percentiles(torch.tensor([1.0, 2.5, 3.5, 10.0]))
    prob = pct.pow(2.0).clamp(min=0.1)
    torch.testing.assert_close(prob, torch.tensor([0.1, 0.25, 0.5625, 1.0]))


@pytest.mark.parametrize("beta", [1.0, 3.0])
def test_kept_fraction_approaches_one_over_beta_plus_one(beta):
    policy, gen = HistoryPercentile(history=1024, beta=beta), seeded(1)
    rng = torch.Generator().manual_seed(2)
    kept = total = 0
    for _ in range(200):
        scores = torch.rand(128, generator=rng)  # i.i.d. losses
        kept += policy.select(scores, 0.5, gen).index.shape[0]
        total += 128
    assert abs(kept / total - 1 / (beta + 1)) < 0.02


def test_keep_derives_beta():
    assert HistoryPercentile().exponent(0.5) == 1.0
    assert HistoryPercentile().exponent(0.25) == 3.0
    assert HistoryPercentile(beta=2.0).exponent(0.5) == 2.0


def test_state_round_trip_continues_identically():
    a, gen_a = HistoryPercentile(history=16), seeded(3)
    for _ in range(3):
        a.select(torch.rand(5, generator=seeded(_)), 0.5, gen_a)
    b = HistoryPercentile(history=16)
    b.load_state_dict(a.state_dict())
    gen_b = seeded(0)
    gen_b.set_state(gen_a.get_state())
    scores = torch.rand(6, generator=seeded(99))
    assert torch.equal(a.select(scores, 0.5, gen_a).index, b.select(scores, 0.5, gen_b).index)


def test_state_with_other_history_size_is_refused():
    a = HistoryPercentile(history=8)
    a.select(torch.rand(3), 0.5, seeded(0))
    with pytest.raises(ValueError, match="8 slots"):
        HistoryPercentile(history=4).load_state_dict(a.state_dict())


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"history": 0}, "history must be an int >= 1"),
        ({"history": 2.5}, "history must be an int >= 1"),
        ({"beta": -1.0}, "beta must be >= 0"),
        ({"min_prob": 1.5}, r"min_prob must be in \[0, 1\]"),
        ({"min_prob": -0.1}, r"min_prob must be in \[0, 1\]"),
    ],
)
def test_history_errors(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        HistoryPercentile(**kwargs)


def test_beta_and_keep_together_is_an_error():
    model = OracleModel([1.0] * 4)
    with pytest.raises(ValueError, match="pass one of them"):
        SBLoader([oracle_batch(range(4))], model, ce, keep=0.5, policy=HistoryPercentile(beta=1.0))
