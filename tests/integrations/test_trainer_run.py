"""What a trainer knows of its run, handed to selection: the planned loader batches (known answers, as Lightning
and the transformers Trainer count them) and how they reach keep="auto" (a length the user gave stands)."""

import pytest
import torch.nn.functional as F
from torch import nn

from sbdata import Auto, Schedule, SelectionEngine
from sbdata.integrations._trainer_progress import planned_batches


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


def run_told(planned: int | None, keep: object, **options: object) -> int | None:
    """The run's length keep="auto" decodes at its one door, the engine, told ``planned`` by a trainer."""
    engine = SelectionEngine(nn.Linear(2, 2), F.cross_entropy, 10, planned, keep=keep, **options)
    return None if engine.keep.auto is None else engine.keep.auto.run


@pytest.mark.filterwarnings("ignore:sbdata keep='auto'")
def test_keep_auto_is_told_the_trainers_plan_unless_the_user_states_the_run():
    assert run_told(120, "auto") == 120
    assert run_told(120, Auto(keeps=(0.5,))) == 120
    assert run_told(120, Auto(run=7)) == 7  # the user's length stands
    assert run_told(120, Auto(epochs=2)) == 20  # 2 epochs of 10 loader batches
    assert run_told(120, "auto", schedule=Schedule(total_steps=7)) == 7  # so does a Schedule's
    assert run_told(None, "auto") is None  # an unknown length tells nothing (and no trial runs)
    assert SelectionEngine(nn.Linear(2, 2), F.cross_entropy, 10, 120, keep=0.5).keep.auto is None
