"""Selective Backprop in PyTorch Lightning: one DataModule wrapper, or one line in ``train_dataloader``.

Wrap a ``LightningDataModule``::

    trainer.fit(module, datamodule=SBDataModule(datamodule, F.cross_entropy, keep=0.5))

or, in a ``LightningModule`` that builds its own loader::

    def train_dataloader(self):
        return sb_train_dataloader(self.trainer, DataLoader(train, batch_size=64, shuffle=True), F.cross_entropy)

Either way the training loader is sharded under DDP as Lightning shards a plain DataLoader (a ``DistributedSampler``
from the trainer's world size and rank, which Lightning cannot inject into a wrapped loader), Lightning's per-epoch
``set_epoch`` reaches that sampler, a :func:`trainer_schedule` runs on the trainer's progress, Lightning never
prefetches into stale scoring (its fetcher reads one batch ahead only from a loader without ``len()``, which is
refused, naming the fix), and every rank's selection state goes into the Lightning checkpoint so a resumed run
continues exactly. :class:`SBStatsLogger` logs the selection statistics with ``self.log``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

try:
    import lightning.pytorch as pl
    from lightning.pytorch.trainer.connectors.data_connector import _process_dataloader
    from lightning.pytorch.trainer.states import RunningStage, TrainerFn
    from lightning.pytorch.utilities.model_helpers import is_overridden
    from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature
except ImportError as error:  # pragma: no cover - exercised only without lightning installed
    raise ImportError("sbdata.integrations.lightning needs lightning: pip install lightning") from error

import torch.distributed as dist

from sbdata._util import Unpack, epoch_length
from sbdata.distributed import rank_and_world
from sbdata.engine import EngineOptions
from sbdata.integrations._trainer_progress import bind_progress, planned_batches, trainer_schedule
from sbdata.loader import SBLoader

__all__ = ["LightningSBLoader", "SBDataModule", "SBStatsLogger", "sb_train_dataloader", "trainer_schedule"]


class LightningSBLoader(SBLoader):
    """An :class:`~sbdata.SBLoader` whose state holds every rank's state, so that Lightning's checkpoint (written by
    rank 0 from ``state_dict()``, which every rank calls) restores each rank's own; built by
    :func:`sb_train_dataloader`."""

    RANKS_KEY = "ranks"

    def state_dict(self) -> dict[str, Any]:
        own = super().state_dict()
        world = rank_and_world()[1]
        if world == 1:
            return {self.RANKS_KEY: [own]}
        states: list[Any] = [None] * world
        dist.all_gather_object(states, own)
        return {self.RANKS_KEY: states}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.RANKS_KEY not in state:
            super().load_state_dict(state)
            return
        rank, world = rank_and_world()
        states = state[self.RANKS_KEY]
        if len(states) != world:
            raise ValueError(
                f"the checkpoint holds the selection state of {len(states)} ranks but {world} now train: resume with "
                f"{len(states)} devices"
            )
        super().load_state_dict(states[rank])

    def __iter__(self) -> Iterator[Any]:
        self.finish_spent_epoch()  # saved after the epoch's last batch: Lightning counts that epoch as done
        return super().__iter__()


def _refuse_read_ahead(sb: SBLoader, module: pl.LightningModule) -> None:
    try:
        len(sb)
    except TypeError as error:
        if is_param_in_hook_signature(module.training_step, "dataloader_iter", explicit=True):
            return  # training_step pulls each batch itself: no prefetch
        raise ValueError(
            f"Lightning prefetches one batch from a training loader without len() ({error}), so selection would "
            "score every batch with weights one step old and checkpoints would miss the prefetched batch: make "
            "len() known (a fixed-count policy such as topk, rank, random or importance over a DataLoader; with "
            "batch_size=, no trainer_schedule), or write training_step(self, dataloader_iter) and call "
            "next(dataloader_iter) in it"
        ) from None


def _planned_batches(trainer: pl.Trainer, loader: Any) -> int | None:
    """The loader batches ``trainer`` will draw from ``loader`` in the whole fit (None: not known, e.g. no len())."""
    per_epoch = epoch_length(loader)
    if per_epoch is None:
        return None
    limit = trainer.limit_train_batches
    if isinstance(limit, int):  # Lightning: an int caps the batches per epoch, a float takes that share of them
        per_epoch = min(per_epoch, limit)
    elif isinstance(limit, float):
        per_epoch = int(per_epoch * limit)
    if per_epoch < 1:
        return None
    return planned_batches(per_epoch, trainer.accumulate_grad_batches, trainer.max_steps, trainer.max_epochs)


def sb_train_dataloader(
    trainer: pl.Trainer, loader: Any, loss_fn: Any = None, **options: Unpack[EngineOptions]
) -> LightningSBLoader:
    """The training loader for ``trainer``: ``loader`` prepared as Lightning prepares a plain one, then selected.

    Call it from ``train_dataloader()`` of a ``LightningModule`` or ``LightningDataModule`` (the trainer is
    ``self.trainer``). Under DDP the loader gets Lightning's ``DistributedSampler`` (shuffled, seeded with
    ``seed_everything``'s seed) unless it has one or ``use_distributed_sampler=False``.

    Args:
        trainer: the ``Trainer`` that fits.
        loader: the training ``DataLoader`` (or any iterable with ``len()``).
        loss_fn: per-sample loss; may come in ``options`` from a task's hooks (``**sbdata.tasks.causal_lm()``).
        **options: options of :class:`~sbdata.SelectionEngine`; a :func:`trainer_schedule` is driven by
            ``trainer.global_step / trainer.estimated_stepping_batches``, and ``keep="auto"`` is told the run's
            planned length in loader batches (``max_epochs``, ``max_steps``, ``limit_train_batches`` and
            ``accumulate_grad_batches`` read as Lightning reads them), which bounds its trials
            (:attr:`~sbdata.Auto.trial_share`), unless ``Auto(epochs=...)``, ``Auto(run=...)`` or a Schedule's
            ``total_steps`` gives one.

    Raises:
        ValueError: for a configuration Lightning would prefetch from (no ``len()``), naming the fix.
    """
    module = trainer.lightning_module
    loader = _process_dataloader(trainer, TrainerFn.FITTING, RunningStage.TRAINING, loader)
    if loss_fn is None:
        raise TypeError("pass loss_fn, the per-sample loss (or a task's hooks: **sbdata.tasks.causal_lm())")
    total: list[float] = []

    def progress() -> float:
        if not total:  # known once Lightning has set up the loader, which is before the first batch is scored
            total.append(max(1, trainer.estimated_stepping_batches))
        return trainer.global_step / total[0]

    bind_progress(options, progress)
    sb = LightningSBLoader(loader, module, loss_fn, _planned_batches(trainer, loader), **options)
    _refuse_read_ahead(sb, module)
    return sb


class SBDataModule(pl.LightningDataModule):
    """``datamodule`` with its training loader selected by :func:`sb_train_dataloader`; everything else delegated.

    Args:
        datamodule: the user's ``LightningDataModule``.
        loss_fn: per-sample loss (or from a task's hooks in ``options``).
        **options: options of :class:`~sbdata.SelectionEngine`.
    """

    def __init__(
        self, datamodule: pl.LightningDataModule, loss_fn: Any = None, **options: Unpack[EngineOptions]
    ) -> None:
        super().__init__()
        self.datamodule = datamodule
        self.loss_fn = loss_fn
        self.options = options
        for name in ("val_dataloader", "test_dataloader", "predict_dataloader"):
            if is_overridden(name, datamodule, pl.LightningDataModule):  # Lightning asks which ones exist
                setattr(self, name, getattr(datamodule, name))

    def prepare_data(self) -> None:
        self.datamodule.prepare_data()

    def setup(self, stage: str) -> None:
        self.datamodule.trainer = self.trainer
        self.datamodule.setup(stage)

    def teardown(self, stage: str) -> None:
        self.datamodule.teardown(stage)

    def train_dataloader(self) -> LightningSBLoader:
        if self.trainer is None:
            raise RuntimeError(
                "SBDataModule.train_dataloader() is called by a Trainer: pass the data module to "
                "trainer.fit(model, datamodule=...)"
            )
        return sb_train_dataloader(self.trainer, self.datamodule.train_dataloader(), self.loss_fn, **self.options)

    def state_dict(self) -> dict[str, Any]:
        return self.datamodule.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.datamodule.load_state_dict(state_dict)


class SBStatsLogger(pl.Callback):
    """Logs ``sb/backprop_fraction``, ``sb/sb_steps``, ``sb/mean_loss_kept`` and ``sb/mean_loss_dropped`` with
    ``pl_module.log`` every ``trainer.log_every_n_steps`` batches (reading them costs one host sync)."""

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any, **kwargs: Any) -> None:
        sb = trainer.train_dataloader
        every = trainer.log_every_n_steps  # type: ignore[attr-defined]  # set by Lightning's logger connector
        if not isinstance(sb, SBLoader) or trainer.fit_loop.epoch_loop.batch_idx % every:
            return
        stats = sb.stats
        values = {
            "sb/backprop_fraction": stats.backprop_fraction,
            "sb/sb_steps": float(stats.sb_steps),
            "sb/mean_loss_kept": stats.mean_loss_kept,
            "sb/mean_loss_dropped": stats.mean_loss_dropped,
        }
        pl_module.log_dict(values, on_step=True, on_epoch=False)
