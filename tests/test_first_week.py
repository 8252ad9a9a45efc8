"""Mistakes that used to train on silently, each refused (or warned about once) at the user's line, naming the fix:
a mid-epoch state loaded into a loader of another shape, a selection stage around another, a loss whose outputs and
targets broadcast, a device this machine does not have; and the resume and warnings of the stacks users scale with
(a loader that is its own iterator, a dataset already split per rank, a shuffle buffer a loader's state leaves out)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBCollator, SBLoader
from tests.helpers import OracleModel, ce, ids_of, oracle_batch, roundtrip

LOSSES = [float(v) for v in torch.rand(64, generator=torch.Generator().manual_seed(3)) * 3]


def loader(n: int = 32, batch_size: int = 4, seed: int = 0) -> DataLoader:
    data = TensorDataset(*oracle_batch(range(n)))
    return DataLoader(data, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))


def state_at(batches: int, **shape) -> dict:
    """A state saved after ``batches`` yielded batches of an epoch over ``loader(**shape)``."""
    sb = SBLoader(loader(**shape), OracleModel(LOSSES), ce, keep=0.5)
    it = iter(sb)
    for _ in range(batches):
        next(it)
    return roundtrip(sb.state_dict())


# ----------------------------------------------------------------- a mid-epoch state into another loader's shape
@pytest.mark.parametrize(
    ("shape", "said"),
    [
        ({"n": 16}, "from a loader of 8 batches of 4, but this loader has 4 batches of 4"),  # another dataset length
        ({"batch_size": 8}, "from a loader of 8 batches of 4, but this loader has 4 batches of 8"),  # another batch
    ],
)
def test_a_mid_epoch_state_into_a_loader_of_another_shape_is_refused_naming_both(shape, said):
    state = state_at(2)
    other = SBLoader(loader(**shape), OracleModel(LOSSES), ce, keep=0.5)
    other.load_state_dict(state)  # checked as the resumed pass starts: after the loop's set_epoch
    for _ in range(2):  # and again on a second try: the state stays loaded, never silently dropped
        with pytest.raises(ValueError, match="saved mid-epoch") as raised:
            iter(other)
        assert said in str(raised.value) and "built as it was" in str(raised.value)


def test_a_state_saved_at_an_epochs_end_loads_into_another_shape_and_the_same_shape_resumes():
    sb = SBLoader(loader(), OracleModel(LOSSES), ce, keep=0.5)
    list(sb)
    ended = roundtrip(sb.state_dict())
    other = SBLoader(loader(n=16, batch_size=8), OracleModel(LOSSES), ce, keep=0.5)
    other.load_state_dict(ended)  # the next epoch starts afresh: nothing to continue
    assert len(list(other)) == 2
    same = SBLoader(loader(), OracleModel(LOSSES), ce, keep=0.5)
    same.load_state_dict(state_at(2))
    assert len(list(same)) == 6


# ----------------------------------------------------------------- selection around selection
def test_an_sbloader_around_a_selecting_loader_is_refused_at_construction():
    model = OracleModel(LOSSES)
    inner = SBLoader(loader(), model, ce, keep=0.5)
    with pytest.raises(TypeError, match="already selects .* scored and cut twice: wrap the plain loader once"):
        SBLoader(inner, model, ce, keep=0.5)
    collated = DataLoader(TensorDataset(*oracle_batch(range(8))), batch_size=4, collate_fn=SBCollator(model, ce))
    with pytest.raises(TypeError, match="an SBCollator"):
        SBLoader(collated, model, ce, keep=0.5)


def test_a_selection_stage_reading_another_ones_batches_is_refused_at_the_first_batch():
    """The stages that cannot be seen at construction (a factory, a generator, a stage composed after another):
    the inner engine refuses as it is asked for a batch inside the outer one's."""
    model = OracleModel(LOSSES)
    inner = SBLoader(loader(), model, ce, keep=0.5)
    outer = SBLoader(lambda: iter(inner), model, ce, keep=0.5)  # a factory hides what it wraps
    with pytest.raises(RuntimeError, match="a selection stage inside another.*Wrap the plain loader once"):
        next(iter(outer))
    from sbdata.wds import sb_select

    twice = sb_select(model, ce, keep=0.5)(sb_select(model, ce, keep=0.5)(loader()))
    with pytest.raises(RuntimeError, match="a selection stage inside another"):
        next(twice)
    again = SBLoader(loader(), model, ce, keep=0.5)  # a plain loader afterwards selects once, as ever
    assert [len(ids_of(batch)) for batch in again] == [2] * 8


# ----------------------------------------------------------------- a per-sample loss that broadcasts
def test_outputs_and_targets_that_broadcast_are_refused_before_torch_warns():
    torch.manual_seed(0)
    data = [(torch.randn(8, 3), torch.randn(8)) for _ in range(2)]
    sb = SBLoader(data, nn.Linear(3, 1), F.mse_loss, keep=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's own broadcast warning would fail the test first
        with pytest.raises(ValueError, match=r"outputs \(8, 1\) and the targets \(8,\) broadcast to \(8, 8\)") as e:
            next(iter(sb))
    assert "m(x).squeeze(1)" in str(e.value)
    fixed = SBLoader(data, nn.Linear(3, 1), F.mse_loss, keep=0.5, forward=lambda m, x: m(x).squeeze(1))
    assert [len(x) for x, _ in fixed] == [4, 4]


# ----------------------------------------------------------------- a device this machine does not have
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_this_machine_does_not_have_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"device='cuda' is not available on this machine: torch reports cpu"):
        SBLoader(loader(), OracleModel(LOSSES), ce, device="cuda")


def test_a_device_index_beyond_the_count_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"device='cuda:1' is not available .*cpu, cuda:0 available"):
        SBLoader(loader(), OracleModel(LOSSES), ce, device="cuda:1")


# ----------------------------------------------------------------- a loader that is its own iterator
class OwnIterator:
    """A loader that is its own iterator and starts its epoch again on every ``iter()`` (as Ray Train's
    ``prepare_data_loader`` wrapper does): a second ``iter()`` draws a new permutation from its seeded sampler."""

    def __init__(self, seed: int) -> None:
        self.loader = loader(seed=seed)
        self.sampler = self.loader.sampler
        self.batch_size = 4
        self._it = None

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        self._it = iter(self.loader)
        return self

    def __next__(self):
        return next(self._it)


def test_a_loader_that_is_its_own_iterator_resumes_exactly():
    whole = [ids_of(b) for b in SBLoader(OwnIterator(5), OracleModel(LOSSES), ce, keep=0.5)]
    first = SBLoader(OwnIterator(5), OracleModel(LOSSES), ce, keep=0.5)
    it = iter(first)
    head = [ids_of(next(it)) for _ in range(3)]
    resumed = SBLoader(OwnIterator(5), OracleModel(LOSSES), ce, keep=0.5)
    resumed.load_state_dict(roundtrip(first.state_dict()))
    assert head + [ids_of(b) for b in resumed] == whole


# ----------------------------------------------------------------- the sharding warning and the shuffle buffer
def test_the_sharding_warning_says_how_to_tell_a_dataset_already_split_per_rank(monkeypatch):
    import sbdata._front._guards as guards

    monkeypatch.setattr(guards, "rank_and_world", lambda: (0, 2))
    monkeypatch.setattr(guards, "_under_accelerate", lambda: False)  # torch.distributed alone (Accelerate: refused)
    with pytest.warns(RuntimeWarning, match="split_dataset_by_node.*add no sampler.*filterwarnings") as caught:
        SBLoader(loader(), OracleModel(LOSSES), ce)
    assert caught[0].filename == __file__


class BufferShuffled(torch.utils.data.IterableDataset):
    """The one thing sbdata reads of a Hugging Face ``datasets.IterableDataset.shuffle(buffer_size=...)``: its
    class lives in the ``datasets`` package and its ``_shuffling`` is set (the real one is tested where installed)."""

    __module__ = "datasets.iterable_dataset"

    def __init__(self, shuffled: bool) -> None:
        self._shuffling = object() if shuffled else None

    def __iter__(self):
        return iter(zip(*oracle_batch(range(16)), strict=True))


@pytest.mark.parametrize("shuffled", [True, False])
def test_a_checkpoint_over_a_shuffle_buffer_the_loaders_state_leaves_out_warns_once(shuffled):
    from torchdata.stateful_dataloader import StatefulDataLoader

    sb = SBLoader(StatefulDataLoader(BufferShuffled(shuffled), batch_size=4), OracleModel(LOSSES), ce, keep=0.5)
    it = iter(sb)
    next(it)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb.state_dict()
        sb.state_dict()
    said = [w for w in caught if "shuffles through a buffer" in str(w.message)]
    assert len(said) == (1 if shuffled else 0)
    if shuffled:
        assert said[0].filename == __file__ and "only as exact as that state" in str(said[0].message)
