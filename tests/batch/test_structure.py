from collections import OrderedDict, defaultdict, namedtuple
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from sbdata import KeptColumn
from sbdata.batch import _structure as _batch

Pair = namedtuple("Pair", ["x", "y"])


@dataclass
class Record:
    image: torch.Tensor
    label: torch.Tensor
    source: str


def test_batch_size_reads_every_field_kind():
    batch = {"x": torch.zeros(4, 3), "k": ["a", "b", "c", "d"], "a": np.zeros((4, 2)), "lr": 0.1, "t": torch.tensor(2)}
    assert _batch.sample_count(batch) == 4


def test_batch_size_disagreement_names_both_fields():
    with pytest.raises(ValueError, match=r"batch\['x'\] has 4 samples but batch\['y'\] has 3"):
        _batch.sample_count({"x": torch.zeros(4), "y": torch.zeros(3)})


def test_batch_size_none_without_batch_fields():
    assert _batch.sample_count({"lr": 0.1, "step": torch.tensor(3)}) is None


def test_select_keeps_every_field_aligned_and_types():
    index = torch.tensor([0, 2])
    batch = OrderedDict(
        x=torch.arange(8).reshape(4, 2),
        keys=("k0", "k1", "k2", "k3"),
        nested=Pair(x=np.arange(4), y=[10, 11, 12, 13]),
        meta="shard-7",
        scale=torch.tensor(0.5),
    )
    out = _batch.select(batch, index)
    assert type(out) is OrderedDict
    assert out["x"].tolist() == [[0, 1], [4, 5]]
    assert out["keys"] == ("k0", "k2")
    assert isinstance(out["nested"], Pair)
    assert isinstance(out["nested"].x, np.ndarray) and out["nested"].x.tolist() == [0, 2]
    assert out["nested"].y == [10, 12]
    assert out["meta"] == "shard-7" and out["scale"] is batch["scale"]  # non-batch fields pass through


def test_select_preserves_defaultdict_and_dataclass():
    dd = defaultdict(list, {"x": torch.arange(3)})
    out = _batch.select(dd, torch.tensor([1]))
    assert isinstance(out, defaultdict) and out.default_factory is list and out["x"].tolist() == [1]
    rec = Record(torch.arange(3), torch.arange(3) * 10, "cam")
    got = _batch.select(rec, torch.tensor([2, 0]))
    assert isinstance(got, Record) and got.label.tolist() == [20, 0] and got.source == "cam"


def test_concat_and_take_roundtrip():
    a = (torch.arange(3), ["a", "b", "c"], np.arange(3))
    b = (torch.arange(3, 5), ["d", "e"], np.arange(3, 5))
    joined = _batch.concat([a, b])
    assert joined[0].tolist() == [0, 1, 2, 3, 4] and joined[1] == ["a", "b", "c", "d", "e"]
    assert joined[2].tolist() == [0, 1, 2, 3, 4]
    part = _batch.take(joined, 1, 4)
    assert part[0].tolist() == [1, 2, 3] and part[1] == ["b", "c", "d"] and part[2].tolist() == [1, 2, 3]


def test_concat_rejects_different_structures():
    with pytest.raises(ValueError, match="different structure"):
        _batch.concat([(torch.arange(2), ["a", "b"]), (torch.arange(2),)])


def test_default_split_shapes():
    x, y = torch.zeros(2, 3), torch.zeros(2)
    assert _batch.default_split((x, y))[0] is x
    assert _batch.default_split([x, y, ["k1", "k2"]])[1] is y  # extra fields ride along
    assert _batch.default_split({"input": x, "target": y, "id": [1, 2]})[0] is x
    assert _batch.default_split(Pair(x, y))[1] is y


@pytest.mark.parametrize(
    ("batch", "fragment"),
    [
        ({"image": torch.zeros(2), "label": torch.zeros(2)}, r"keys \['image', 'label'\].*split="),
        (torch.zeros(2, 3), "Tensor.*split="),
        (["a", "b"], "list.*split="),
        ((torch.zeros(2),), "tuple.*split="),
    ],
)
def test_default_split_errors_name_the_fix(batch, fragment):
    with pytest.raises(ValueError, match=fragment):
        _batch.default_split(batch)


def test_to_device_moves_tensors_only():
    batch = {"x": torch.zeros(2), "a": np.zeros(2), "k": ["a", "b"]}
    out = _batch.to_device(batch, torch.device("cpu"))
    assert out["x"] is batch["x"] and out["a"] is batch["a"]


def test_as_tensor_refuses_object_arrays():
    with pytest.raises(TypeError, match="dtype object"):
        _batch.as_tensor(np.array([{}, {}], dtype=object), torch.device("cpu"), "inputs")


# ----------------------------------------------------------------- columns: per-sample lists subset as a whole
COLUMNS = {
    "dicts": [{"id": i, "tags": ["a"] * i} for i in range(4)],
    "lists": [[i] * (i + 1) for i in range(4)],
    "strings": ("s0", "s1", "s2", "s3"),
    "nones": [None, None, None, None],
    "scalar_tensors": [torch.tensor(float(i)) for i in range(4)],
}


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_a_list_without_tensors_is_one_column_subset_as_a_whole(name):
    column = COLUMNS[name]
    batch = (torch.arange(4), torch.arange(4) * 10, column)
    assert _batch.sample_count(batch) == 4
    out = _batch.select(batch, torch.tensor([1, 3]))
    # by default the column's own type (a list stays a list, a tuple a tuple), whole items, never cut inside
    assert out[0].tolist() == [1, 3] and type(out[2]) is type(column)
    assert list(out[2]) == [column[1], column[3]]
    out = _batch.select(batch, torch.tensor([1, 3]), lazy_columns=True)
    # lazy: a KeptColumn, the kept items read from the column's own type once the device indices are needed
    assert isinstance(out[2], KeptColumn) and not out[2].resolved
    assert len(out[2]) == 2 and not out[2].resolved  # the length is known without reading the indices
    assert type(out[2].values()) is type(column) and out[2].resolved
    assert list(out[2]) == [column[1], column[3]]  # whole items, never cut inside
    joined = _batch.concat([_batch.take(batch, 0, 1), _batch.take(batch, 1, 4)])
    assert list(joined[2]) == list(column) and joined[0].tolist() == [0, 1, 2, 3]


def test_a_list_of_lists_with_batch_size_rows_inside_is_still_a_column():
    batch = {"x": torch.arange(3), "spans": [[1, 2, 3], [4, 5, 6], [7, 8, 9]]}  # inner lists of length B too
    out = _batch.select(batch, torch.tensor([2]))
    assert out["spans"] == [[7, 8, 9]] and out["x"].tolist() == [2]


def test_a_column_of_the_wrong_length_is_a_size_mismatch():
    with pytest.raises(ValueError, match=r"batch\[0\] has 4 samples but batch\[2\] has 3.*column"):
        _batch.sample_count((torch.zeros(4), torch.zeros(4), [{"id": 0}, {"id": 1}, {"id": 2}]))


def test_a_list_of_tensors_is_a_group_of_fields_even_when_its_length_is_the_batch_size():
    x1, x2 = torch.arange(2), torch.arange(2) * 10  # default_collate's [[x1, x2], y] with B == len([x1, x2])
    batch = [[x1, x2], torch.arange(2) * 100, [{"id": 0}, {"id": 1}]]
    out = _batch.select(batch, torch.tensor([1]))
    assert out[0][0].tolist() == [1] and out[0][1].tolist() == [10] and out[2] == [{"id": 1}]
    # read the same way once subset and joined (the pool), whatever the pieces' sizes
    pieces = [_batch.select(batch, torch.tensor([1])), _batch.select(batch, torch.tensor([0, 1]))]
    joined = _batch.concat(pieces)
    assert joined[0][0].tolist() == [1, 0, 1] and joined[2] == [{"id": 1}, {"id": 0}, {"id": 1}]


def test_per_sample_tensors_of_different_lengths_in_a_list_are_refused_naming_the_fix():
    batch = (torch.zeros(3), torch.zeros(3), [torch.zeros(5), torch.zeros(2), torch.zeros(7)])
    with pytest.raises(ValueError, match=r"but batch\[2\]\[0\] has 5.*group of fields.*numpy object array"):
        _batch.sample_count(batch)


def test_a_batch_without_tensors_is_one_column_of_records():
    records = [{"text": f"t{i}", "label": i} for i in range(4)]
    assert _batch.sample_count(records) == 4
    assert _batch.select(records, torch.tensor([0, 2])) == [records[0], records[2]]
    with pytest.raises(ValueError, match="split="):
        _batch.default_split(records)


def test_the_fast_paths_for_tensor_sequences_answer_as_the_general_traversal(monkeypatch):
    """``(x, y)`` batches and the pool's ``((x, y), weights)`` pieces skip the general traversal: same answers."""
    x, y = torch.arange(8).reshape(4, 2), torch.arange(4) * 10
    index = torch.tensor([3, 1])
    batches = [(x, y), [x, y], ((x, y), None), ((x, y), y * 2), [None, [x, y]], ((x, y), None, y)]

    def answers() -> list:
        found = []
        for batch in batches:
            paths: list = []
            _batch.map_fields(batch, lambda field, path, seen=paths: seen.append(path))
            found.append((_batch.sample_count(batch), paths))
            found.extend(repr(out) for out in (_batch.select(batch, index), _batch.take(batch, 1, 3)))
            found.extend(repr(out) for out in (_batch.to_device(batch, torch.device("cpu")), _batch.fields(batch)))
        found.extend(repr(_batch.concat([batch, batch])) for batch in batches)
        found.append(_batch.default_split((x, y, y)))
        with pytest.raises(ValueError, match=r"batch\[0\] has 4 samples but batch\[1\] has 3") as error:
            _batch.sample_count((x, y[:3]))
        return [*found, str(error.value)]

    fast = answers()
    monkeypatch.setattr(_batch, "tensor_sequence", lambda batch: False)
    monkeypatch.setattr(_batch, "pair_group", lambda batch: False)
    general = answers()
    assert fast[:-2] == general[:-2] and fast[-1] == general[-1]
    assert all(a is b for a, b in zip(fast[-2], general[-2], strict=True))


def test_a_tuple_of_empty_groups_and_none_is_still_a_column():
    """No tensor inside: a column of two items, as before the pool's fast path, not a group."""
    assert _batch.sample_count(((), None)) == 2
    assert _batch.select(((), None), torch.tensor([1])) == (None,)
