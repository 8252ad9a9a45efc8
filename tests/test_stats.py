import math

import torch

from sbdata.stats import StatsTracker


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
