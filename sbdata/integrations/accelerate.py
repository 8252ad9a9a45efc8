"""Selective Backprop under Hugging Face Accelerate: prepare, then wrap; one selection state per rank.

Order matters. ``accelerator.prepare`` shards a ``DataLoader`` across processes but passes any other object through
untouched, so ``accelerator.prepare(SBLoader(loader, ...))`` leaves every process reading all the data. Prepare the
DataLoader first and wrap the prepared one::

    model, opt, loader = accelerator.prepare(model, opt, loader)
    sb = wrap(accelerator, loader, model, F.cross_entropy, keep=0.5)   # = SBLoader(loader, ...) + per-rank state
    ...
    accelerator.save_state(directory)   # also writes sbdata_rank{r}.pt for every rank
    accelerator.load_state(directory)   # and reads each rank's own back into sb

``accelerator.register_for_checkpointing(sb)`` is not enough under several processes: Accelerate writes rank 0's
state alone and loads it into every rank (sbdata warns when that happens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import accelerate
except ImportError as error:  # pragma: no cover - exercised only without accelerate installed
    raise ImportError("sbdata.integrations.accelerate needs accelerate: pip install accelerate") from error

from sbdata._util import Unpack
from sbdata.engine import EngineOptions
from sbdata.integrations._rank_state import load_rank_state, save_rank_state
from sbdata.loader import SBLoader

__all__ = ["load_sb_state", "save_sb_state", "wrap"]

_PREPARED = ("DataLoaderShard", "DataLoaderDispatcher")


def _is_prepared(loader: Any) -> bool:
    return type(loader).__name__ in _PREPARED  # type(), not isinstance: a prepared loader reports DataLoader


def save_sb_state(sb: SBLoader, directory: str | Path) -> Path:
    """Write this rank's selection state to ``directory/sbdata_rank{rank}.pt``; call it on every rank."""
    return save_rank_state(sb, directory)


def load_sb_state(sb: SBLoader, directory: str | Path) -> None:
    """Load this rank's selection state from ``directory``; the next pass over ``sb`` continues the saved epoch."""
    load_rank_state(sb, directory)


def wrap(
    accelerator: accelerate.Accelerator, loader: Any, model: Any, loss_fn: Any = None, **options: Unpack[EngineOptions]
) -> SBLoader:
    """``SBLoader`` over a prepared loader, saved and loaded per rank with ``accelerator.save_state/load_state``.

    Args:
        accelerator: the ``Accelerator`` that trains.
        loader: a ``DataLoader`` already passed through ``accelerator.prepare`` (an unprepared one is prepared here).
        model: the prepared model being trained.
        loss_fn: per-sample loss (see :class:`~sbdata.SBLoader`); may come in ``options`` from a task's hooks such as
            ``**sbdata.tasks.causal_lm()``.
        **options: options of :class:`~sbdata.SelectionEngine`.

    Raises:
        TypeError: when ``loader`` is already an ``SBLoader`` (wrap the prepared DataLoader instead).
    """
    if isinstance(loader, SBLoader):
        raise TypeError(
            "wrap() takes the DataLoader, not an SBLoader: prepare the DataLoader, then wrap it "
            "(sb = wrap(accelerator, accelerator.prepare(loader), model, loss_fn, ...))"
        )
    if not _is_prepared(loader) and hasattr(loader, "batch_sampler"):
        loader = accelerator.prepare(loader)
    if loss_fn is None:
        raise TypeError("pass loss_fn, the per-sample loss (or a task's hooks: **sbdata.tasks.causal_lm())")
    sb = SBLoader(loader, model, loss_fn, **options)
    accelerator.register_save_state_pre_hook(lambda models, weights, directory: save_sb_state(sb, directory))
    accelerator.register_load_state_pre_hook(lambda models, directory: load_sb_state(sb, directory))
    return sb
