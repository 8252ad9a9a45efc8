"""Batches in checkpoints: encode held batches so that ``torch.load(..., weights_only=True)`` reads them back.

``weights_only`` accepts tensors, Python scalars, strings, bytes, ``None``, and lists, tuples, dicts and
``OrderedDict`` of them. A batch held in the pool or the output queue may also hold numpy arrays (WebDataset),
namedtuples and dataclasses: those become tagged dicts here and are rebuilt on load with the same type, dtype
and shape. Classes are looked up among the modules already imported, never imported from a checkpoint.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import OrderedDict, deque
from typing import Any

import numpy as np
import torch

from sbdata.batch._column import KeptColumn

__all__ = ["decode", "encode"]

TAG = "__sbdata__"
_PLAIN = (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device, torch.Size)


def _type_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve(name: str, kind: str) -> type:
    module_name, _, qualname = name.partition(":")
    module = sys.modules.get(module_name)
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if not isinstance(found, type):
        raise ValueError(
            f"the state holds a {kind} batch of type {name}, which is not defined in this process: import the "
            f"module {module_name!r} that defines it before load_state_dict"
        )
    return found


def encode(obj: Any, path: str = "batch") -> Any:
    """``obj`` in a form that ``torch.load(..., weights_only=True)`` accepts; :func:`decode` restores it.

    Raises:
        TypeError: for a leaf type that cannot be stored that way, naming where it is and the fix.
    """
    if isinstance(obj, np.generic):  # before the plain types: np.float64 is a float
        return {TAG: "numpy", "dtype": obj.dtype.str, "shape": None, "data": obj.item()}
    if isinstance(obj, (torch.Tensor, *_PLAIN)):
        return obj
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "OV":
            raise TypeError(
                f"{path} is a numpy array of dtype {obj.dtype}, which a weights_only checkpoint cannot hold: "
                "decode such fields to numbers or strings before the selection stage"
            )
        if obj.dtype.kind in "US":  # strings: stored as Python strings or bytes
            return {TAG: "numpy", "dtype": obj.dtype.str, "shape": list(obj.shape), "data": obj.ravel().tolist()}
        native = obj.view(np.int64) if obj.dtype.kind in "Mm" else obj.astype(obj.dtype.newbyteorder("="), copy=False)
        return {TAG: "numpy", "dtype": obj.dtype.str, "data": torch.from_numpy(native.copy(order="C"))}
    if isinstance(obj, KeptColumn):  # kept as it is, unread: the source column and the indices on the device
        return {TAG: "kept", "source": encode(obj.source, f"{path}.source"), "index": obj.positions}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        items = [encode(v, f"{path}.{name}") for name, v in zip(obj._fields, obj, strict=True)]
        return {TAG: "namedtuple", "type": _type_name(type(obj)), "items": items}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        values = {f.name: encode(getattr(obj, f.name), f"{path}.{f.name}") for f in dataclasses.fields(obj)}
        return {TAG: "dataclass", "type": _type_name(type(obj)), "fields": values}
    if type(obj) in (dict, OrderedDict):
        mapping = {key: encode(value, f"{path}[{key!r}]") for key, value in obj.items()}
        if TAG in obj:  # a user's key that looks like the tag: store the mapping as pairs
            return {TAG: "dict", "ordered": type(obj) is OrderedDict, "items": list(mapping.items())}
        return type(obj)(mapping)
    if type(obj) in (list, tuple, deque):
        items = [encode(value, f"{path}[{i}]") for i, value in enumerate(obj)]
        return tuple(items) if type(obj) is tuple else items
    raise TypeError(
        f"{path} is a {type(obj).__name__}, which a weights_only checkpoint cannot hold: batches in a state may hold "
        "tensors, numpy arrays, strings, numbers, None, and dicts, lists, tuples, namedtuples and dataclasses of them; "
        "convert it in your collate function (e.g. to a dict)"
    )


def decode(obj: Any) -> Any:
    """The object :func:`encode` stored."""
    if isinstance(obj, list):
        return [decode(value) for value in obj]
    if isinstance(obj, tuple):
        return tuple(decode(value) for value in obj)
    if not isinstance(obj, dict):
        return obj
    kind = obj.get(TAG)
    if kind is None:
        return type(obj)((key, decode(value)) for key, value in obj.items())
    if kind == "numpy":
        dtype = np.dtype(obj["dtype"])
        data = obj["data"]
        if isinstance(data, torch.Tensor):
            array = data.numpy()
            return array.view(dtype) if dtype.kind in "Mm" else array.astype(dtype, copy=False)
        if obj.get("shape") is None:
            return np.array(data, dtype=dtype)[()]
        return np.array(data, dtype=dtype).reshape(obj["shape"])
    if kind == "kept":
        return KeptColumn(decode(obj["source"]), obj["index"])
    if kind == "namedtuple":
        cls = _resolve(obj["type"], "namedtuple")
        return cls(*[decode(value) for value in obj["items"]])
    if kind == "dataclass":
        cls = _resolve(obj["type"], "dataclass")
        if not dataclasses.is_dataclass(cls):
            raise ValueError(f"{obj['type']} is not a dataclass in this process")
        instance = object.__new__(cls)
        for name, value in obj["fields"].items():
            object.__setattr__(instance, name, decode(value))
        return instance
    if kind == "dict":
        pairs = [(key, decode(value)) for key, value in obj["items"]]
        return OrderedDict(pairs) if obj["ordered"] else dict(pairs)
    raise ValueError(f"unknown entry {kind!r} in a saved batch: the state was written by another sbdata version")
