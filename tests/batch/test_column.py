"""KeptColumn: a host column subset by device indices, read only when an item is read."""

import pytest
import torch

from sbdata import KeptColumn
from sbdata.batch import decode, encode
from sbdata.batch._structure import join_columns
from tests.helpers import roundtrip

KEYS = ["k0", "k1", "k2", "k3", "k4"]


def test_length_is_known_without_reading_and_the_first_read_resolves_once():
    column = KeptColumn(KEYS, torch.tensor([1, 3]))
    assert len(column) == 2 and not column.resolved
    assert column[0] == "k1" and column.resolved
    assert column.values() is column.values()  # read once, then cached
    assert type(column.values()) is list and list(column) == ["k1", "k3"] and "k3" in column


def test_the_source_type_comes_back_and_equality_is_by_items():
    column = KeptColumn(tuple(KEYS), torch.tensor([0, 4]))
    assert type(column.values()) is tuple and column == ("k0", "k4") and column == ["k0", "k4"]
    assert column == KeptColumn(KEYS, torch.tensor([0, 4])) and column != ["k4", "k0"]
    assert repr(column) == "KeptColumn(['k0', 'k4'])" and column[1:] == ("k4",)
    with pytest.raises(TypeError):
        hash(column)


def test_subset_take_and_join_compose_the_indices_without_reading():
    column = KeptColumn(KEYS, torch.tensor([1, 2, 4]))
    sub, part = column.subset(torch.tensor([0, 2])), column.take(1, 3)
    plain = ["p0", "p1"]
    joined = join_columns([sub, plain, part])
    assert not (column.resolved or sub.resolved or part.resolved or joined.resolved)
    assert list(sub) == ["k1", "k4"] and list(part) == ["k2", "k4"]
    assert list(joined) == ["k1", "k4", "p0", "p1", "k2", "k4"] and type(joined.values()) is list


def test_state_keeps_it_unread_and_weights_only_loads_it():
    column = KeptColumn(("a", "b", "c"), torch.tensor([2, 0]))
    back = decode(roundtrip(encode(column)))
    assert isinstance(back, KeptColumn) and not back.resolved and not column.resolved
    assert back.values() == ("c", "a")
