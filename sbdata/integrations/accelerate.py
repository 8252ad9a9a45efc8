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

The public "no trainer" scripts resume with ``accelerator.skip_first_batches(train_dataloader, resume_step)``, whose
stock version rebuilds a plain ``DataLoader`` from the loader's dataset (there is no hook). ``wrap`` therefore
gives *that* accelerator a ``skip_first_batches`` that hands the wrapped loader back unchanged (``load_state`` has
already restored where its epoch stands, so the next pass continues it exactly) and passes every other loader to
the stock method; no other accelerator and no class is touched. It checks that the loaded state stands where the
script resumes (``resume_step`` batches into the epoch), and where a one-process loader shuffles with a
``RandomSampler`` that has no generator (the global RNG would decide each epoch's order, which no checkpoint
replays), it gives the sampler one, seeded from ``torch.initial_seed()``, so that the resume is exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import RandomSampler

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


def _seed_the_shuffle(loader: Any) -> None:
    """Give ``loader`` and the torch ``RandomSampler`` that orders it a generator where they have none, as
    ``DataLoader(..., shuffle=True, generator=g)`` would: otherwise each ``iter()`` draws the order and the workers'
    base seed from the global RNG, which a resumed run re-iterating the loader cannot replay (and whose extra draw
    would move the global stream, e.g. dropout, off the uninterrupted run's)."""
    made = torch.Generator().manual_seed(torch.initial_seed() % 2**63)
    batch_sampler = getattr(loader, "batch_sampler", None)
    inner = getattr(batch_sampler, "batch_sampler", batch_sampler)  # Accelerate's BatchSamplerShard wraps one
    for sampler in (getattr(loader, "sampler", None), getattr(inner, "sampler", None)):
        if type(sampler) is RandomSampler and sampler.generator is None:
            sampler.generator = made
    base = getattr(loader, "base_dataloader", loader)  # a prepared loader adapts the DataLoader it holds
    if hasattr(base, "generator") and base.generator is None:
        base.generator = made


def _resume_in_place(sb: SBLoader, num_batches: int) -> SBLoader:
    """``accelerator.skip_first_batches(sb, num_batches)`` for a wrapped loader: ``sb`` itself, whose loaded state
    continues the epoch exactly, after checking that it stands ``num_batches`` batches into it.

    Raises:
        RuntimeError: when no state was loaded but batches are to be skipped, or when the loaded state stands
            elsewhere in the epoch, naming the fix.
    """
    engine = sb.engine
    if not engine.continues_saved_epoch:
        if num_batches:
            raise RuntimeError(
                f"skip_first_batches(sb, {num_batches}) on a wrapped loader skips by restoring its selection state, "
                "but none was loaded: call accelerator.load_state(checkpoint) before skip_first_batches"
            )
        return sb
    if engine.pooled:
        return sb  # pooled batches do not map to loader batches: the loaded state alone says where the epoch is
    done = engine.epoch_step
    if num_batches == 0 and sb.finish_spent_epoch():
        return sb  # saved after the epoch's last batch: the script resumes at the next epoch's start
    if done != num_batches:
        raise RuntimeError(
            f"skip_first_batches(sb, {num_batches}) resumes {num_batches} batches into the epoch, but the loaded "
            f"selection state was saved after {done}: load the checkpoint that the script's resume_step was "
            "computed from (the same gradient_accumulation_steps and len(train_dataloader))"
        )
    return sb


def _hand_back_on_skip(accelerator: Any, sb: SBLoader) -> None:
    """Make this accelerator's ``skip_first_batches`` hand ``sb`` back (checked); other loaders go to the stock one."""
    stock = accelerator.skip_first_batches  # the bound method, or an earlier wrap's

    def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
        if dataloader is sb:
            return _resume_in_place(sb, num_batches)
        return stock(dataloader, num_batches)

    accelerator.skip_first_batches = skip_first_batches


def wrap(
    accelerator: accelerate.Accelerator, loader: Any, model: Any, loss_fn: Any = None, **options: Unpack[EngineOptions]
) -> SBLoader:
    """``SBLoader`` over a prepared loader, saved and loaded per rank with ``accelerator.save_state/load_state``;
    ``accelerator.skip_first_batches(sb, resume_step)`` hands it back (see the module docstring).

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
    _seed_the_shuffle(loader)  # several processes: Accelerate seeded the sampler; the loader's base seed remains
    sb = SBLoader(loader, model, loss_fn, **options)
    _hand_back_on_skip(accelerator, sb)
    accelerator.register_save_state_pre_hook(lambda models, weights, directory: save_sb_state(sb, directory))
    accelerator.register_load_state_pre_hook(lambda models, directory: load_sb_state(sb, directory))
    return sb
