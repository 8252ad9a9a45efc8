import math
from dataclasses import replace

import pytest
import torch

from sbdata import SBLoader
from sbdata.engine._stats import StatsTracker
from tests.helpers import OracleModel, ce, ids_of, oracle_batch


def test_snapshot_before_any_selection_has_nan_means():
    stats = StatsTracker().snapshot()
    assert stats.steps == 0 and math.isnan(stats.mean_loss_kept) and math.isnan(stats.mean_loss_dropped)
    assert math.isnan(stats.backprop_fraction)


def test_record_selection_and_state_round_trip():
    tracker = StatsTracker()
    tracker.samples_seen = tracker.samples_scored = 4
    tracker.samples_yielded = 2
    tracker.record_selection(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([2, 3]))
    snap = tracker.snapshot()
    assert snap.samples_kept == 2 and snap.mean_loss_kept == 3.5 and snap.mean_loss_dropped == 1.5
    assert snap.backprop_fraction == 0.5
    other = StatsTracker()
    other.load_state_dict(tracker.state_dict())
    assert other.snapshot() == snap
    assert snap.as_dict()["backprop_fraction"] == 0.5
    assert snap.postfix() == {"bp": "0.50", "kept_loss": "3.500", "dropped_loss": "1.500"}


def test_postfix_shows_auto_and_no_ratio_as_n_a():
    tracker = StatsTracker()
    stats = tracker.snapshot()
    on = {"auto_on_share": 0.5, "auto_on": True, "auto_keep": 0.25, "auto_tau": 1.5}
    assert replace(stats, **on, auto_speedup=1.6).postfix()["x"] == "1.60"
    shown = replace(stats, **on, auto_speedup=math.nan).postfix()
    assert (shown["auto"], shown["tau"], shown["x"]) == ("on 0.25", "1.50", "n/a")


def test_non_finite_losses_are_left_out_of_the_means():
    tracker = StatsTracker()
    nan, inf = float("nan"), float("inf")
    tracker.record_selection(torch.tensor([1.0, nan, 3.0, 4.0, inf]), torch.tensor([1, 3, 4]))  # kept: nan, 4, inf
    tracker.record_selection(torch.tensor([2.0, 6.0]), torch.tensor([1]))
    snap = tracker.snapshot()
    assert snap.samples_kept == 4
    assert snap.mean_loss_kept == (4.0 + 6.0) / 2 and snap.mean_loss_dropped == (1.0 + 3.0 + 2.0) / 3


def test_nan_policy_keep_keeps_the_stats_finite_for_the_rest_of_the_run():
    losses = [0.5, float("nan"), 2.0, 1.0, 0.25, 3.0, 1.5, 0.75]
    batches = [oracle_batch(range(4)), oracle_batch(range(4, 8))]
    sb = SBLoader(batches, OracleModel(losses), ce, keep=0.5, nan_policy="keep")
    assert [ids_of(out) for out in sb] == [[1, 2], [5, 6]]  # the NaN sample is kept as the hardest
    stats = sb.stats
    # the oracle's losses are exact to float32 only (they come out of cross_entropy), hence approx
    assert stats.mean_loss_kept == pytest.approx((2.0 + 3.0 + 1.5) / 3, rel=1e-6)
    assert stats.mean_loss_dropped == pytest.approx((0.5 + 1.0 + 0.25 + 0.75) / 4, rel=1e-6)


def test_lazily_summed_steps_match_the_step_by_step_sums():
    """LAZY_STEPS steps of one shape are summed from one table, steps of mixed shapes one by one: same sums."""
    from sbdata.engine._stats import LAZY_STEPS

    nan, inf = float("nan"), float("inf")
    uniform = [(torch.tensor([1.0, nan, 3.0, 4.0 + s, inf]), torch.tensor([1, 3, 4])) for s in range(LAZY_STEPS)]
    mixed = [*uniform[:-1], (torch.tensor([2.0, 6.0]), torch.tensor([1]))]
    for steps in (uniform, mixed):
        tracker = StatsTracker()
        for losses, index in steps:
            tracker.record_selection(losses, index)
        assert tracker._unsummed == []  # summed in one go at LAZY_STEPS
        kept = [v for losses, index in steps for v in losses[index].tolist() if math.isfinite(v)]
        every = [v for losses, _ in steps for v in losses.tolist() if math.isfinite(v)]
        dropped_sum, dropped = sum(every) - sum(kept), len(every) - len(kept)
        snap = tracker.snapshot()
        assert snap.mean_loss_kept == sum(kept) / len(kept)
        assert snap.mean_loss_dropped == pytest.approx(dropped_sum / dropped, rel=1e-12)


def test_restore_counters_undoes_a_step_that_summed_the_pending_ones():
    """The snapshot taken before a batch restores the stats even when that batch triggered the lazy sum."""
    from sbdata.engine._stats import LAZY_STEPS

    tracker, reference = StatsTracker(), StatsTracker()
    for step in range(LAZY_STEPS - 1):
        for each in (tracker, reference):
            each.record_selection(torch.tensor([1.0, 2.0 + step]), torch.tensor([1]))
    saved = tracker.counters()
    tracker.sb_steps += 1
    tracker.record_selection(torch.tensor([100.0, 200.0]), torch.tensor([0]))  # sums every pending step
    assert tracker._unsummed == [] and tracker._loss_sums is not None
    tracker.restore_counters(saved)
    assert len(tracker._unsummed) == LAZY_STEPS - 1 and tracker._loss_sums is None
    assert tracker.snapshot() == reference.snapshot()


def test_the_engine_counts_are_the_integer_fields_of_its_stats_read_without_the_loss_sums():
    from sbdata import SBLoader
    from tests.helpers import OracleModel, ce, oracle_batch

    sb = SBLoader([oracle_batch(range(8)), oracle_batch(range(8, 12))], OracleModel([float(i) for i in range(12)]), ce)
    list(sb)
    counts = sb.engine.counts
    assert len(sb.engine.tracker._unsummed) == 2  # reading the counts summed nothing: both SB steps still wait
    stats = sb.stats
    expected = {"steps": 2, "sb_steps": 2, "samples_seen": 12, "samples_scored": 12, "samples_reused": 0,
                "samples_kept": 6, "samples_yielded": 6}  # fmt: skip
    assert counts == expected == {name: getattr(stats, name) for name in expected}
    assert sb.engine.tracker._unsummed == []  # stats did sum them


def test_print_shows_the_fields_a_user_reads_and_no_nan():
    fresh = SBLoader([oracle_batch(range(4))], OracleModel([1.0, 2.0, 3.0, 4.0]), ce, keep=0.5)
    assert str(fresh.stats) == "SBStats(steps=0, sb_steps=0, samples_seen=0, samples_kept=0)"  # nothing measured yet
    list(fresh)
    said = str(fresh.stats)
    assert said.startswith("SBStats(steps=1, sb_steps=1, samples_seen=4, samples_kept=2, backprop_fraction=0.5, ")
    assert "mean_loss_kept=3.5, mean_loss_dropped=1.5, scoring_seconds=" in said
    assert "nan" not in said and "auto" not in said and "precision" not in said
    full = repr(fresh.stats)
    assert "auto_tau=nan" in full and "precision_agreement=nan" in full  # every field is still in the dataclass
