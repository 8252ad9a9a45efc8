"""The trial's pure functions: the window order, the exposures, the progress fit and the verdict, on planted levels
whose answers are known exactly."""

from __future__ import annotations

import math

import pytest

from sbdata.auto._trials import Progress, exposures, fit_progress, shortfall, trial_order, verdict


def test_trial_order_is_a_palindrome_of_cycles():
    assert trial_order(1, 1) == [0, 1, 1, 0]
    assert trial_order(2, 2) == [0, 1, 2, 2, 1, 0] * 2
    with pytest.raises(ValueError, match="arms >= 1 and cycles >= 1, got arms=0, cycles=1"):
        trial_order(0, 1)


def test_exposures_count_earlier_windows_and_part_of_the_own():
    assert exposures([0, 1, 1, 0], 1, middle=0.5) == [[0.5, 0.0], [1.0, 0.5], [1.0, 1.5], [1.5, 2.0]]
    # the exposures add up to the time: every window's middle
    for i, row in enumerate(exposures(trial_order(2, 2), 2, middle=0.25)):
        assert sum(row) == pytest.approx(i + 0.25)


def planted(rates: list[float], order: list[int], curvature: float = 0.0, middle: float = 0.5) -> list[float]:
    arms = len(rates) - 1
    return [
        0.3 + sum(r * e for r, e in zip(rates, row, strict=True)) + curvature * (i + middle) ** 2
        for i, row in enumerate(exposures(order, arms, middle))
    ]


@pytest.mark.parametrize("curvature", [0.0, -0.0005])
def test_fit_recovers_planted_rates_exactly_with_or_without_curvature(curvature):
    order = trial_order(2, 2)
    rates = [0.01, 0.02, -0.005]
    fit = fit_progress(planted(rates, order, curvature, 0.6), order, 2, middle=0.6)
    assert fit.rates == pytest.approx(rates, abs=1e-9)
    assert all(abs(v) < 1e-12 for row in fit.covariance for v in row)  # an exact fit: no residual


def test_fit_checks_its_input():
    with pytest.raises(ValueError, match="3 levels for 4 windows: pass one per window"):
        fit_progress([0.1, 0.2, 0.3], [0, 1, 1, 0], 1)
    with pytest.raises(ValueError, match="a fit of 4 parameters needs at least 4 windows, got 2"):
        fit_progress([0.1, 0.2], [0, 1], 1)


def test_a_fit_without_a_residual_degree_of_freedom_has_nan_errors_and_stays_plain():
    fit = fit_progress([0.1, 0.2, 0.3, 0.4], [0, 1, 1, 0], 1)  # 4 windows, 4 parameters
    assert math.isnan(fit.se(0))
    assert verdict(fit, [3.0, 1.75], [0.25]).arm == 0


def exact(rates: list[float]) -> Progress:
    arms = len(rates)
    return Progress(tuple(rates), tuple(tuple(0.0 for _ in range(arms)) for _ in range(arms)))


def test_verdict_prices_progress_per_second():
    # plain 3 s and keep 0.25 1.75 s per batch: equal progress per batch is 12/7 per second
    result = verdict(exact([0.01, 0.01]), [3.0, 1.75], [0.25])
    assert result.arm == 1 and result.speedups == pytest.approx((12 / 7,))
    assert result.reason.startswith(
        "Decided: select, keeping 0.25 of each batch. Keeping 0.25 learned 1.71x as fast per second as whole "
        "batches (inf standard errors above the 1.05x bar)"
    )
    # 0.6 of the progress per batch: 1.03x, below 1 + margin
    result = verdict(exact([0.01, 0.006]), [3.0, 1.75], [0.25])
    assert result.arm == 0 and result.speedups == pytest.approx((0.6 * 12 / 7,))
    assert result.reason.startswith("Decided: train on whole batches. Keeping 0.25 learned 1.03x")
    assert "Selection turns on only when it beats 1.05x by more than 1 standard error" in result.reason


def test_verdict_picks_the_arm_with_the_strongest_evidence_and_needs_z_errors():
    cov = ((1e-6, 0.0, 0.0), (0.0, 1e-6, 0.0), (0.0, 0.0, 4e-6))
    fit = Progress((0.01, 0.009, 0.012), cov)
    costs = [3.0, 1.75, 2.5]  # keep 0.25 and keep 0.5
    result = verdict(fit, costs, [0.25, 0.5], z=1.0)
    # keep 0.25: 0.009 * 12/7 - 1.05 * 0.01 = 0.00493, se sqrt((12/7)^2 + 1.05^2) 1e-3 = 2.01e-3: 2.45 se
    # keep 0.5: 0.012 * 1.2 - 0.0105 = 0.0039, se sqrt(1.44 * 4 + 1.1025) 1e-3 = 2.62e-3: 1.49 se
    assert result.contrasts == pytest.approx((2.45, 1.49), abs=0.01)
    assert result.arm == 1
    assert verdict(fit, costs, [0.25, 0.5], z=3.0).arm == 0  # not 3 standard errors: plain


def test_verdict_without_plain_progress_compares_seconds_only_by_the_contrast():
    result = verdict(exact([0.0, 0.01]), [3.0, 1.75], [0.25])
    assert result.arm == 1 and math.isnan(result.speedups[0])
    assert "Keeping 0.25 could not be given a speed ratio, because whole batches themselves barely improved" in (
        result.reason
    )
    assert verdict(exact([0.0, 0.0]), [3.0, 1.75], [0.25]).arm == 0  # nothing moves: plain


def test_the_incumbent_stays_unless_it_measures_below_plain_by_z_errors():
    cov = ((1e-6, 0.0), (0.0, 1e-6))
    costs = [3.0, 1.75]  # 12/7 the progress per second at equal progress per batch
    # 0.6 of plain's progress per batch: 1.03x per second, below the entry's 1.05 but not below plain
    fit = Progress((0.01, 0.006), cov)
    assert verdict(fit, costs, [0.25]).arm == 0
    kept = verdict(fit, costs, [0.25], incumbent=1)
    assert kept.arm == 1 and kept.reason.startswith("Decided: keep selecting at keep 0.25. Keeping 0.25 learned 1.03x")
    assert "turns off only when it measures slower than whole batches by more than 1 standard error" in kept.reason
    # 0.5 of it: 0.857x; 0.005 * 12/7 - 0.01 = -0.00143, se sqrt((12/7)^2 + 1) 1e-3 = 1.98e-3: -0.72 se, stays
    assert verdict(Progress((0.01, 0.005), cov), costs, [0.25], incumbent=1).arm == 1
    # 0.3 of it: 0.51x; 0.003 * 12/7 - 0.01 = -0.00486: -2.45 se, below plain by more than z: off
    dropped = verdict(Progress((0.01, 0.003), cov), costs, [0.25], incumbent=1)
    assert dropped.arm == 0 and dropped.reason.startswith("Decided: train on whole batches")
    assert verdict(Progress((0.01, 0.003), cov), costs, [0.25], incumbent=1, z=3.0).arm == 1
    # without a degree of freedom the incumbent is not measured below plain: it stays
    nan = Progress((0.01, 0.001), ((math.nan, math.nan), (math.nan, math.nan)))
    assert verdict(nan, costs, [0.25], incumbent=1).arm == 1 and verdict(nan, costs, [0.25]).arm == 0
    with pytest.raises(ValueError, match="incumbent must be an arm index in 0..1, got 2"):
        verdict(fit, costs, [0.25], incumbent=2)


def test_a_speedup_ratio_needs_plain_progress_above_two_standard_errors():
    """Plain +0.01 per window with a standard error of 0.006 is within 2 se of zero: no ratio, though the contrast
    (0.02 * 12/7 - 1.05 * 0.01 = 0.0238 against an se of sqrt((12/7)^2 0.001^2 + 1.05^2 0.006^2) = 0.00653: 3.6
    se) still turns selection on; with an se of 0.004 the ratio is 0.02 / 0.01 * 12/7 = 3.43x."""
    wide = Progress((0.01, 0.02), ((0.006**2, 0.0), (0.0, 0.001**2)))
    result = verdict(wide, [3.0, 1.75], [0.25])
    assert result.arm == 1 and math.isnan(result.speedups[0]) and result.contrasts == pytest.approx((3.64,), abs=0.01)
    assert result.reason.startswith(
        "Decided: select, keeping 0.25 of each batch. Keeping 0.25 could not be given a speed ratio, because whole "
        "batches themselves barely improved (+0.0100 per window, within 2 standard errors (0.0060 each) of none); by "
        "the difference in progress per second it stood 3.6 standard errors above the 1.05x bar"
    )
    narrow = Progress((0.01, 0.02), ((0.004**2, 0.0), (0.0, 0.001**2)))
    assert verdict(narrow, [3.0, 1.75], [0.25]).speedups == pytest.approx((2 * 12 / 7,))


def sums(values: list[float]) -> tuple[float, float, float]:
    return sum(values), float(len(values)), sum(v * v for v in values)


def test_shortfall_is_the_level_difference_in_standard_errors_of_the_measured_samples():
    # selection's samples 0, 0, 1, 1 (level 0.5, sample variance 1/3), whole batches' 1, 1, 1, 0 (0.75, 1/4): the
    # difference -0.25 over sqrt(1/12 + 1/16) = sqrt(7/48)
    assert shortfall(sums([0, 0, 1, 1]), sums([1, 1, 1, 0])) == pytest.approx(-0.25 / math.sqrt(7 / 48))
    assert shortfall(sums([1, 1, 1, 0]), sums([0, 0, 1, 1])) == pytest.approx(0.25 / math.sqrt(7 / 48))
    # accuracy over 2,000 samples each: 0.80 against 0.85 is 4.2 standard errors below
    select, plain = [1.0] * 1600 + [0.0] * 400, [1.0] * 1700 + [0.0] * 300
    expected = -0.05 / math.sqrt(0.8 * 0.2 / 1999 + 0.85 * 0.15 / 1999)
    assert shortfall(sums(select), sums(plain)) == pytest.approx(expected) and expected < -4.1


def test_shortfall_without_a_spread_or_with_too_few_samples():
    assert shortfall(sums([0.25, 0.25]), sums([0.5, 0.5])) == -math.inf  # no spread: any loss of ground is certain
    assert shortfall(sums([0.3, 0.3]), sums([0.3, 0.3])) == 0.0
    assert math.isnan(shortfall(sums([0.2]), sums([0.3, 0.3])))  # one sample: no variance
    assert math.isnan(shortfall((0.0, 0.0, 0.0), sums([0.3, 0.3])))
