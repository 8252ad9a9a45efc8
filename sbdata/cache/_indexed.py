"""Per-sample ids for a map-style dataset: :func:`with_index` (what a dense :class:`~sbdata.LossCache` keys on)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.utils.data import Dataset

__all__ = ["with_index"]


class IndexedDataset(Dataset):
    """A map-style dataset whose samples also carry their index (see :func:`with_index`)."""

    def __init__(self, dataset: Any, key: str = "index") -> None:
        self.dataset = dataset
        self.key = key

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        sample = self.dataset[index]
        if isinstance(sample, Mapping):
            return {**sample, self.key: index}
        if isinstance(sample, (tuple, list)):
            return (*sample, index)
        return (sample, index)


def with_index(dataset: Any, key: str = "index") -> IndexedDataset:
    """Wrap a map-style dataset so that every sample carries its integer index.

    A tuple sample ``(x, y)`` becomes ``(x, y, index)`` (use ``id_key=-1``); a dict sample gains ``key``
    (use ``id_key=key``); any other sample ``s`` becomes ``(s, index)``.
    """
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise TypeError(
            f"with_index needs a map-style dataset with __getitem__ and __len__, got {type(dataset).__name__}"
        )
    return IndexedDataset(dataset, key)
