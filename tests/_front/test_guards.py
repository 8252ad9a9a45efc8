"""The one-time warnings of sbdata._front: read-ahead consumers, unsharded loaders under several ranks, and a
state loaded on another rank; plus the sampler pass-throughs that let frameworks set the epoch."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from sbdata import SBLoader
from sbdata._front import _guards
from tests.helpers import OracleModel, ce, oracle_batch

LOSSES = [float(i % 7) + 0.5 for i in range(64)]


def make_loader(n: int = 32, batch: int = 4, **options) -> tuple[SBLoader, nn.Module]:
    model = nn.Linear(1, 2)
    data = DataLoader(TensorDataset(torch.randn(n, 1), torch.randint(0, 2, (n,))), batch_size=batch)
    return SBLoader(data, model, F.cross_entropy, keep=0.5, **options), model


def train_step(model: nn.Module, opt: torch.optim.Optimizer, batch) -> None:
    x, y = batch
    F.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()


def read_ahead_warnings(record) -> list:
    return [w for w in record if "reads batches ahead" in str(w.message)]


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw_fused"])
def test_a_plain_loop_never_warns(optimizer):
    sb, model = make_loader()
    opt = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
        "adam": lambda p: torch.optim.Adam(p),
        "adamw_fused": lambda p: torch.optim.AdamW(p, fused=True),
    }[optimizer](model.parameters())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            for batch in sb:
                train_step(model, opt, batch)
    assert read_ahead_warnings(record) == []


def test_gradient_accumulation_and_a_window_fetched_ahead_do_not_warn():
    """Two micro-batches per step, fetched one by one, or both before the first backward (what the Transformers
    Trainer does): every batch is trained with the parameters it was scored with."""
    sb, model = make_loader()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for i, (x, y) in enumerate(sb):  # accumulate 2, fetched one at a time
            F.cross_entropy(model(x), y).backward()
            if i % 2 == 1:
                opt.step()
                opt.zero_grad()
        iterator = iter(sb)
        for window in zip(iterator, iterator, strict=False):  # fetch the window of 2, then train it
            for x, y in window:
                F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    assert read_ahead_warnings(record) == []


def test_eval_only_use_and_iteration_without_training_do_not_warn():
    sb, model = make_loader()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert len(list(sb)) == 8  # a training-mode model, never trained
        model.eval()
        for x, _ in sb:
            with torch.no_grad():
                model(x)
    assert read_ahead_warnings(record) == []


def test_a_consumer_prefetching_one_batch_warns_once_on_its_second_batch():
    """Lightning's fetcher for a loader without len(): it fetches batch t+1 before training batch t."""
    sb, model = make_loader()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen_at = []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            iterator = iter(sb)
            ahead = next(iterator)
            for i, upcoming in enumerate([*iterator, None]):
                before = len(read_ahead_warnings(record))
                train_step(model, opt, ahead)
                if len(read_ahead_warnings(record)) > before:
                    seen_at.append(i)
                ahead = upcoming
    assert seen_at == [1]  # the first batch is fine; the second was scored before the first step; then quiet
    [warning] = read_ahead_warnings(record)
    assert "Fix: take one batch per training step" in str(warning.message)
    assert warning.filename == __file__  # raised in a backward hook, under torch's frames: the user's backward line


def test_a_warning_from_a_backward_thread_arrives_at_the_users_next_batch():
    """Where backward runs on a thread of its own (CUDA's), the hook has no user frame above it: the warning waits
    for the user's next call into sbdata and names that line."""
    import threading

    sb, model = make_loader()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        batches = iter(sb)
        ahead, current = next(batches), next(batches)  # read ahead: the second batch is scored before the step
        for batch in (ahead, current):
            x, y = batch
            backward = threading.Thread(target=F.cross_entropy(model(x), y).backward)  # no user frame in it
            backward.start()
            backward.join()
            opt.step()
            opt.zero_grad()
        assert read_ahead_warnings(record) == []  # deferred: nowhere to point yet
        next(batches)  # the user's next call into sbdata
    [warning] = read_ahead_warnings(record)
    assert warning.filename == __file__ and warning.lineno == line_of("next(batches)  # the user's next call")


def line_of(text: str) -> int:
    """The line number of the first line of this file that contains ``text``."""
    with open(__file__) as source:
        return next(number for number, line in enumerate(source, 1) if text in line and "line_of(" not in line)


def test_warnings_skip_the_frameworks_frames_and_wait_for_a_user_frame():
    """A warning raised by sbdata under a framework's frames (here a stand-in module named like accelerate's)
    names the user's line; one raised on a thread with no user frame is issued at the next call into sbdata."""
    import threading

    from sbdata._util import warn_from_user_code

    framework: dict = {"__name__": "accelerate.accelerator"}
    exec(
        compile("def save_state(hook):\n    hook('from a hook')\n", "/site-packages/accelerate/x.py", "exec"), framework
    )
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        framework["save_state"](warn_from_user_code)  # the user's line
        thread = threading.Thread(target=warn_from_user_code, args=("from a thread",))
        thread.start()
        thread.join()
        assert [str(w.message) for w in record] == ["from a hook"]
        sb, _ = make_loader()
        next(iter(sb))  # the next call into sbdata
    assert [(str(w.message), w.filename) for w in record] == [("from a hook", __file__), ("from a thread", __file__)]
    assert record[0].lineno == line_of('framework["save_state"](warn_from_user_code)')
    assert record[1].lineno == line_of("next(iter(sb))  # the next call")


def test_another_loaders_training_is_not_taken_for_this_ones():
    """A loader listed without training, then another loader over the same model that trains batch by batch."""
    listed, model = make_loader()
    assert len(list(listed)) == 8
    data = DataLoader(TensorDataset(torch.randn(32, 1), torch.randint(0, 2, (32,))), batch_size=4)
    trained = SBLoader(data, model, F.cross_entropy, keep=0.5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for batch in trained:
            train_step(model, opt, batch)
    assert read_ahead_warnings(record) == []


def test_listing_the_batches_before_training_warns():
    sb, model = make_loader()
    opt = torch.optim.AdamW(model.parameters(), fused=True)  # no version bump: the step counter catches it
    with pytest.warns(RuntimeWarning, match="reads batches ahead"):
        for batch in list(sb):
            train_step(model, opt, batch)


def test_a_model_without_trainable_parameters_is_not_watched():
    model = OracleModel(LOSSES)
    model.scale.requires_grad_(False)
    sb = SBLoader([oracle_batch(range(4)), oracle_batch(range(4, 8))], model, ce, keep=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(sb)) == 2


def test_unsharded_loader_under_several_ranks_warns_naming_the_fix(monkeypatch):
    monkeypatch.setattr(_guards, "rank_and_world", lambda: (0, 2))
    monkeypatch.setattr(_guards, "_under_accelerate", lambda: False)  # torch.distributed alone (Accelerate: refused)
    data = TensorDataset(torch.randn(8, 1), torch.zeros(8, dtype=torch.long))
    with pytest.warns(RuntimeWarning, match="every rank would train on the same data.*DistributedSampler"):
        SBLoader(DataLoader(data, batch_size=4, shuffle=True), nn.Linear(1, 2), F.cross_entropy)
    sharded = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, num_replicas=2, rank=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SBLoader(sharded, nn.Linear(1, 2), F.cross_entropy)  # sharded: quiet
        SBLoader([oracle_batch(range(4))], OracleModel(LOSSES), ce)  # a plain iterable: cannot tell, quiet
        SBLoader(lambda: iter([]), OracleModel(LOSSES), ce)  # a factory: cannot tell, quiet


def test_unsharded_loader_in_one_process_is_quiet():
    data = TensorDataset(torch.randn(8, 1), torch.zeros(8, dtype=torch.long))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SBLoader(DataLoader(data, batch_size=4), nn.Linear(1, 2), F.cross_entropy)


def test_a_state_loaded_on_another_rank_warns(monkeypatch):
    sb, _ = make_loader()
    state = sb.state_dict()
    assert state[SBLoader.RANK_KEY] == 0
    other, _ = make_loader()
    monkeypatch.setattr(_guards, "rank_and_world", lambda: (1, 2))
    with pytest.warns(RuntimeWarning, match="rank 1 loads a selection state saved by rank 0"):
        other.load_state_dict(state)


def test_sampler_pass_throughs_let_lightning_set_the_epoch():
    from lightning.fabric.utilities.data import _set_sampler_epoch

    data = TensorDataset(torch.randn(8, 1), torch.zeros(8, dtype=torch.long))
    sampler = DistributedSampler(data, num_replicas=2, rank=0)
    sb = SBLoader(DataLoader(data, batch_size=2, sampler=sampler), nn.Linear(1, 2), F.cross_entropy)
    assert sb.sampler is sampler and sb.batch_sampler.sampler is sampler
    _set_sampler_epoch(sb, 3)  # what Lightning's fit loop calls on each training loader, every epoch
    assert sampler.epoch == 3
    assert len(sb.dataset) == 8 and sb.dataset.source is data  # for len() and indexing; never to rebuild from
    with pytest.raises(AttributeError):
        sb.sampler = None
    assert SBLoader([oracle_batch(range(4))], OracleModel(LOSSES), ce).sampler is None
