"""What a trainer knows of its run, handed to selection: the planned loader batches (known answers, as Lightning
and the transformers Trainer count them) and how they reach keep="auto" (a length the user gave stands)."""

import pytest

from sbdata import Auto, Schedule
from sbdata.integrations._trainer_progress import keep_told_the_run, planned_batches


@pytest.mark.parametrize(
    ("per_epoch", "accumulate", "max_steps", "max_epochs", "expected"),
    [
        (10, 1, None, 3, 30),  # epochs only
        (10, 1, 25, None, 25),  # steps only
        (10, 1, 25, 2, 20),  # the epochs end first
        (10, 1, 15, 2, 15),  # the steps end first
        (10, 4, None, 2, 20),  # 3 optimizer steps an epoch, the last on 2 batches
        (10, 4, 4, None, 14),  # 3 steps (10 batches), then one more of 4 batches
        (10, 4, 3, None, 10),  # a step on the epoch's remainder ends the run at the epoch's end
        (10, 1, None, 1.5, 15),  # a float of epochs rounds to whole steps
        (10, 4, None, 0.5, 8),  # ceil(0.5 * 3) = 2 steps of 4 batches
        (10, 1, -1, -1, None),  # Lightning's "no limit" for both
        (10, 1, None, None, None),
    ],
)
def test_planned_batches(per_epoch, accumulate, max_steps, max_epochs, expected):
    assert planned_batches(per_epoch, accumulate, max_steps, max_epochs) == expected


def test_keep_auto_is_told_the_run():
    assert keep_told_the_run({"keep": "auto"}, 120) == Auto(run=120)
    assert keep_told_the_run({"keep": Auto(keeps=(0.5,))}, 120) == Auto(keeps=(0.5,), run=120)


@pytest.mark.parametrize(
    "options",
    [
        {"keep": Auto(run=7)},  # the user's length stands
        {"keep": "auto", "schedule": Schedule(total_steps=7)},  # so does a Schedule's
        {"keep": 0.5},  # a share has no trials to bound
        {"keep": None},
    ],
)
def test_a_length_the_user_gave_or_another_keep_stands(options):
    assert keep_told_the_run(options, 120) is options["keep"]


def test_an_unknown_length_tells_nothing():
    assert keep_told_the_run({"keep": "auto"}, None) == "auto"
