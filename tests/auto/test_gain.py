"""The gain estimate's pure functions (sbdata/auto/_gain.py), against answers computed by hand."""

import math

import pytest
import torch

from sbdata.auto import CostTable, score_sums, small_batch_speedup, speedup_range, tau_from_sums
from sbdata.auto._gain import effective_batch, progress, shrink_speedup

FE = CostTable.forward_equivalents()  # score 1 per sample, train 3 per sample, no fixed costs


def tau(scores: object) -> float:
    """``tau`` of one batch of scores, as the trials compute it: device sums, then the host formula."""
    return tau_from_sums(*score_sums(torch.as_tensor(scores, dtype=torch.float64)).tolist())


@pytest.mark.parametrize(
    "scores, expected",
    [
        ([1.0, 1.0, 1.0, 1.0], 1.0),  # flat: no gain
        ([0.0, 0.0, 0.0, 4.0], 2.0),  # mean 1, mean square 4: sqrt(4) / 1
        ([1.0, 3.0], math.sqrt(5) / 2),  # mean 2, mean square 5
        ([0.0, 0.0, 0.0, 4.0, math.nan, math.inf, -math.inf], 2.0),  # non-finite scores left out
        ([0.0, 0.0], 1.0),  # nothing to weigh: no gain
        ([], 1.0),
    ],
)
def test_tau_of_planted_scores(scores, expected):
    assert tau(scores) == pytest.approx(expected)


def test_tau_equals_katharopoulos_fleuret_form():
    s = torch.rand(37, generator=torch.Generator().manual_seed(3), dtype=torch.float64) ** 3
    g, u = s / s.sum(), 1.0 / len(s)
    paper = 1.0 / math.sqrt(1.0 - float(((g - u) ** 2).sum() / (g**2).sum()))
    assert tau(s) == pytest.approx(paper, rel=1e-9)


def test_score_sums_stay_on_the_device_as_float64_and_clip_negatives():
    sums = score_sums(torch.tensor([-1.0, 2.0, math.nan], dtype=torch.float32))
    assert sums.dtype == torch.float64 and sums.tolist() == [2.0, 4.0, 2.0]  # -1 counts as 0, NaN not at all
    assert tau_from_sums(*sums.tolist()) == pytest.approx(math.sqrt(2.0))


def test_effective_batch_without_replacement():
    assert effective_batch(16, 4, 2.0) == pytest.approx(1 / (1 / 16 + (12 / 15) / (4 * 4)))  # 8.89
    assert effective_batch(16, 16, 1.0) == 16  # a draw of the whole batch is the plain step
    assert effective_batch(16, 16, 3.0) == 16
    # a flat spread: a uniform draw of k, whose batch mean estimates the population's as k samples do
    assert effective_batch(1000, 100, 1.0) == pytest.approx(1 / (1 / 1000 + (900 / 999) / 100))
    assert effective_batch(1000, 100, 1.0) == pytest.approx(100, rel=0.01)


def test_progress_follows_the_noise_scale():
    assert progress(64, math.inf) == 64  # noise-dominated: proportional to the batch
    assert progress(64, 0.0) == 1.0  # far above the critical batch: the batch does not matter
    assert progress(64, 64) == pytest.approx(0.5)  # at the critical batch: half the noiseless step


def test_small_batch_speedup():
    # FE has no fixed cost: at an infinite noise scale a quarter batch makes a quarter of the progress per step at
    # a quarter of the seconds (1.0x); far above the critical batch every step makes full progress (4x)
    assert small_batch_speedup(0.25, 256, FE) == pytest.approx(1.0)
    assert small_batch_speedup(0.25, 256, FE, noise_scale=0.0) == pytest.approx(4.0)
    # at B_noise = 64: (1 + 64/256) / (1 + 64/64) * 4 = 2.5
    assert small_batch_speedup(0.25, 256, FE, noise_scale=64.0) == pytest.approx(2.5)
    # a fixed cost per step (an optimizer step of 64 sample-equivalents) eats into it: (3*256 + 64) / (3*64 + 64)
    fixed = CostTable(score_per_sample=1.0, train_per_sample=3.0, train_fixed=64.0)
    assert small_batch_speedup(0.25, 256, fixed, noise_scale=0.0) == pytest.approx(832 / 256)


def test_speedup_range_brackets_every_noise_scale():
    low, high = speedup_range(1.5, 0.25, 256, FE)
    assert low == pytest.approx(shrink_speedup(1.5, 0.25, 256, FE))
    assert high == pytest.approx(3 * 256 / (256 + 3 * 64))  # only the seconds count: 12/7
    for noise in (1.0, 16.0, 256.0, 4096.0):
        assert low <= shrink_speedup(1.5, 0.25, 256, FE, noise_scale=noise) <= high


def test_forward_equivalent_break_even_at_keep_quarter_is_tau_2_05():
    low, high = 1.0, 5.0
    for _ in range(60):  # bisection on the shrink layout, B = 400 so that k = 100 exactly
        middle = (low + high) / 2
        low, high = (middle, high) if shrink_speedup(middle, 0.25, 400, FE) < 1 else (low, middle)
    # 1 + 4 c / tau^2 = 12/7 with the finite-population factor c = (400 - 100) / 399
    assert low == pytest.approx(math.sqrt(5.6 * 300 / 399), abs=1e-6)
    assert round(low, 2) == 2.05


def test_shrink_speedup_by_hand():
    # tau 2, keep 0.5 of 16: b_eff = 1 / (1/16 + (8/15)/(8*4)) = 12.63, progress 12.63/16; seconds 48 / (16 + 24)
    progress_ = 1 / (1 / 16 + (8 / 15) / 32) / 16
    assert shrink_speedup(2.0, 0.5, 16, FE) == pytest.approx(progress_ * 1.2)
    # half the scores reused: 48 / (8 + 24) = 1.5
    assert shrink_speedup(2.0, 0.5, 16, FE, reuse=0.5) == pytest.approx(progress_ * 1.5)
    # far above the critical batch the progress is whole: only the seconds count
    assert shrink_speedup(2.0, 0.5, 16, FE, noise_scale=0.0) == pytest.approx(1.2)


def test_cost_table_fit_and_checks():
    table = CostTable.fit({64: 1 + 64 * 0.5, 256: 1 + 256 * 0.5}, {64: 2 + 64 * 2.0, 256: 2 + 256 * 2.0}, 0.25)
    assert (table.score_fixed, table.score_per_sample) == pytest.approx((1.0, 0.5))
    assert (table.train_fixed, table.train_per_sample, table.overhead) == pytest.approx((2.0, 2.0, 0.25))
    one = CostTable.fit({32: 4.0}, {32: 8.0})  # one size: a line through the origin
    assert (one.score(64), one.train(16)) == pytest.approx((8.0, 4.0))
    with pytest.raises(ValueError, match=r"CostTable.score_fixed must be a finite number of seconds >= 0, got -1"):
        CostTable(1.0, 1.0, score_fixed=-1)
    with pytest.raises(ValueError, match="train_per_sample or train_fixed > 0"):
        CostTable(1.0, 0.0)
    with pytest.raises(ValueError, match="at least one score measurement"):
        CostTable.fit({}, {1: 1.0})


def test_the_one_price_of_an_sb_step():
    # issues 41 and 49: every reader prices an SB step through CostTable.sb_step
    from sbdata.auto._gain import StepPrice

    costs = CostTable(score_per_sample=1.0, train_per_sample=3.0, score_fixed=2.0, train_fixed=5.0, overhead=0.5)
    price = costs.sb_step(16, 4)
    assert price == StepPrice(scoring=18.0, training=17.0, overhead=0.5) and price.seconds == 35.5
    assert costs.sb_step(16, 4, reuse=0.5).scoring == 9.0
    fe = CostTable.forward_equivalents()
    # b_eff of 4 drawn from 16 at tau 1: 1 / (1/16 + (12/15) / 4) = 80/21; a plain step 48 FE, a selection step 28
    assert shrink_speedup(1.0, 0.25, 16, fe) == pytest.approx(80 / 21 / 16 * 48 / 28)
