"""SBCollator: the selection engine as a DataLoader ``collate_fn``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import default_collate

from sbdata._front import EngineFront, check_not_in_worker
from sbdata._util import Unpack
from sbdata.engine import EngineOptions, LossFn, SelectionEngine

__all__ = ["SBCollator"]


class SBCollator(EngineFront):
    """Collate samples, then keep the hard subset: ``DataLoader(ds, batch_size=B, collate_fn=SBCollator(...))``.

    The scoring pass must see the live model, so the DataLoader must collate in the training process
    (``num_workers=0``); in a worker process the model is a stale copy and calling the collator raises. With
    workers, wrap the DataLoader in :class:`~sbdata.SBLoader` instead. Each call is one loader batch on the
    schedule's step count. The pooled ``batch_size=`` path needs an iterator front end and is not available here.

    Args:
        model: the live model being trained.
        loss_fn: ``loss_fn(outputs, targets, reduction='none')`` or a loss module.
        collate_fn: turns a list of samples into a batch. Default ``torch.utils.data.default_collate``.
        **options: keyword options of :class:`~sbdata.SelectionEngine`, except ``batch_size``/``drop_last``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: LossFn,
        collate_fn: Callable[[list[Any]], Any] = default_collate,
        **options: Unpack[EngineOptions],
    ) -> None:
        if not callable(collate_fn):
            raise TypeError(f"collate_fn must be callable, got {type(collate_fn).__name__}")
        if options.get("batch_size") is not None:
            raise ValueError(
                "SBCollator returns one batch per call and cannot pool to a fixed batch_size=; "
                "use SBLoader(DataLoader(...), model, loss_fn, batch_size=...) instead"
            )
        cache = options.get("cache")
        if cache is not None and getattr(cache, "unit", None) == "epoch":
            raise ValueError(
                "a collate_fn never sees epoch boundaries, so LossCache(unit='epoch') cannot age: "
                "use LossCache(unit='step', ...) with SBCollator"
            )
        self.collate_fn = collate_fn
        self.engine = SelectionEngine(model, loss_fn, **options)

    def __call__(self, samples: list[Any]) -> Any:
        check_not_in_worker(
            "SBCollator",
            "use num_workers=0 with SBCollator, or wrap the DataLoader in sbdata.SBLoader, which scores in the "
            "training process",
        )
        return self.engine.process(self.collate_fn(samples))
