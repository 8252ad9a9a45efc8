import pytest

from sbdata import Schedule, should_selective_backprop


@pytest.mark.parametrize(
    ("interrupt", "pattern"),
    [
        (0, "SSSSSS"),
        (1, "......"),
        (2, "S.S.S."),
        (3, "SS.SS."),
    ],
)
def test_interrupt_truth_table(interrupt, pattern):
    got = "".join("S" if should_selective_backprop(0.6, idx, interrupt=interrupt) else "." for idx in range(6))
    assert got == pattern


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [(0.0, False), (0.49, False), (0.5, True), (0.89, True), (0.9, False), (1.0, False)],
)
def test_window_edges(fraction, expected):
    assert should_selective_backprop(fraction, 0, start=0.5, end=0.9, interrupt=0) is expected


def test_schedule_counts_steps_over_total():
    schedule = Schedule(start=0.5, end=0.9, interrupt=0, total_steps=10)
    assert [schedule.is_active(step, step) for step in range(10)] == [False] * 5 + [True] * 4 + [False]


def test_schedule_combines_window_and_interrupt_with_in_epoch_index():
    schedule = Schedule(start=0.5, end=1.0, interrupt=2, total_steps=8)
    # two epochs of 4 batches: batch_idx restarts at 0 each epoch
    got = [schedule.is_active(step, step % 4) for step in range(8)]
    assert got == [False, False, False, False, True, False, True, False]


def test_schedule_defaults_with_clock_match_composer():
    schedule = Schedule(total_steps=100)
    assert (schedule.start, schedule.end, schedule.interrupt) == (0.5, 0.9, 2)


def test_schedule_without_clock_is_always_on():
    schedule = Schedule()
    assert all(schedule.is_active(step, step) for step in range(10))
    assert schedule.fraction(5) is None


def test_interrupt_without_clock_still_interrupts():
    schedule = Schedule(interrupt=3)
    assert [schedule.is_active(i, i) for i in range(6)] == [True, True, False, True, True, False]


def test_progress_callable_drives_the_window():
    progress = {"value": 0.0}
    schedule = Schedule(start=0.2, end=0.4, interrupt=0, progress=lambda: progress["value"])
    assert not schedule.is_active(0, 0)
    progress["value"] = 0.3
    assert schedule.is_active(0, 0)
    progress["value"] = 0.4
    assert not schedule.is_active(0, 0)


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"start": 0.5}, ValueError, "needs the length of training"),
        ({"end": 0.9}, ValueError, "needs the length of training"),
        ({"start": 0.9, "end": 0.5, "total_steps": 10}, ValueError, "start <= end"),
        ({"start": -0.1, "total_steps": 10}, ValueError, "0 <= start"),
        ({"interrupt": -1}, ValueError, "interrupt must be an int >= 0"),
        ({"interrupt": 1.5}, ValueError, "interrupt must be an int"),
        ({"total_steps": 0}, ValueError, "total_steps must be >= 1"),
        ({"total_steps": 10.0}, TypeError, "total_steps must be an int"),
        ({"total_steps": 10, "progress": lambda: 0.0}, ValueError, "not both"),
        ({"progress": 0.5}, TypeError, "progress must be a zero-argument callable"),
    ],
)
def test_schedule_errors(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        Schedule(**kwargs)


def test_progress_returning_nan_is_an_error():
    schedule = Schedule(progress=lambda: float("nan"))
    with pytest.raises(ValueError, match="progress"):
        schedule.is_active(0, 0)
