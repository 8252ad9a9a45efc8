"""Held batches in checkpoints: every leaf type comes back from torch.load(weights_only=True) as it was."""

import collections
import dataclasses

import numpy as np
import pytest
import torch

from sbdata.batch import decode, encode
from tests.helpers import assert_batches_equal, roundtrip

Pair = collections.namedtuple("Pair", ["x", "key"])


@dataclasses.dataclass(frozen=True)
class Frozen:
    x: torch.Tensor
    label: str


@pytest.mark.parametrize(
    "batch",
    [
        {"npy": np.arange(6, dtype=np.float32).reshape(3, 2), "cls": np.array([1, 2, 3], dtype=np.int64)},
        {"big_endian": np.array([1, 2], dtype=">i4"), "f16": np.ones(2, dtype=np.float16), "b": np.ones(2, bool)},
        {"keys": np.array(["a", "bc"]), "raw": np.array([b"x", b"yz"]), "zero_d": np.array(3.5)},
        {"when": np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[D]"), "scalar": np.float64(2.5)},
        Pair(torch.ones(2, 1), ["a", "b"]),
        [Frozen(torch.zeros(2), "f"), (torch.ones(2), None, 3, "s", b"b")],
        collections.OrderedDict(a=torch.ones(1)),
        {"__sbdata__": "a user key that looks like the tag", "x": torch.ones(1)},
    ],
)
def test_encoded_batches_round_trip_through_a_weights_only_load(batch):
    back = decode(roundtrip(encode(batch)))
    assert_batches_equal(back, batch)
    for leaf_back, leaf in zip(_leaves(back), _leaves(batch), strict=True):
        if isinstance(leaf, (np.ndarray, np.generic)):
            assert leaf_back.dtype == leaf.dtype and np.shape(leaf_back) == np.shape(leaf)


def _leaves(obj):
    if isinstance(obj, dict):
        return [leaf for value in obj.values() for leaf in _leaves(value)]
    if isinstance(obj, (list, tuple)):
        return [leaf for value in obj for leaf in _leaves(value)]
    return [obj]


def test_unstorable_fields_are_refused_at_state_time_naming_where():
    with pytest.raises(TypeError, match=r"batch\['meta'\] is a numpy array of dtype object"):
        encode({"meta": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(TypeError, match=r"batch\[0\] is a set.*convert it in your collate function"):
        encode([{1, 2}])


def test_a_class_not_defined_in_the_loading_process_is_named():
    stored = encode(Pair(torch.ones(1), ["a"]))
    stored["type"] = "no_such_module:Pair"
    with pytest.raises(ValueError, match="import the module 'no_such_module'"):
        decode(stored)
