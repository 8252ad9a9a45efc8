"""Selective Backprop in PyTorch Lightning with DDP on CPU: one wrapper around your LightningDataModule.

``SBDataModule`` shards the training loader as Lightning would (a DistributedSampler from the trainer's world size
and rank, reshuffled every epoch), scores each batch with the live LightningModule, trains on the hardest half,
runs its schedule on the trainer's progress and puts every rank's selection state in the Lightning checkpoint.

Needs the ``lightning`` extra (``pip install -e ".[lightning]"`` from the clone's root). Run from the clone's root::

    python examples/lightning_ddp.py                 # 2 CPU processes through Lightning's launcher
    python examples/lightning_ddp.py --devices 1
"""

from __future__ import annotations

import argparse
import gc

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl

    from sbdata.integrations.lightning import SBDataModule, SBStatsLogger, trainer_schedule
except ImportError as error:  # --help works without the extra; running names it
    MISSING: ImportError | None = error
    LightningDataModule: type = object
    LightningModule: type = nn.Module
else:
    MISSING = None
    LightningDataModule, LightningModule = pl.LightningDataModule, pl.LightningModule


class Blobs(LightningDataModule):
    """Four Gaussian classes in 8 dimensions, partly overlapping (some samples stay hard)."""

    def __init__(self, samples: int = 4096, batch_size: int = 64) -> None:
        super().__init__()
        self.samples, self.batch_size = samples, batch_size

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(0)
        y = torch.randint(0, 4, (self.samples,), generator=generator)
        centers = torch.randn(4, 8, generator=generator) * 1.5
        x = centers[y] + torch.randn(self.samples, 8, generator=generator)
        self.train, self.val = TensorDataset(x[:-512], y[:-512]), TensorDataset(x[-512:], y[-512:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=512)


class Classifier(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # selection scores the module as module(inputs)
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self(x).argmax(1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()
    if MISSING is not None:
        raise SystemExit(f'{MISSING}: this example needs the lightning extra: pip install -e ".[lightning]"')
    pl.seed_everything(0, verbose=False)
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        callbacks=[SBStatsLogger()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = SBDataModule(
        Blobs(args.samples),
        F.cross_entropy,
        keep=0.5,
        schedule=trainer_schedule(start=0.25, end=1.0, interrupt=2),  # plain warm-up, then SB on alternate batches
    )
    trainer.fit(Classifier(), datamodule=data)
    stats = trainer.train_dataloader.stats
    if trainer.is_global_zero:
        print(
            f"{trainer.world_size} process(es), {args.epochs} epochs: validation accuracy "
            f"{trainer.callback_metrics['val_acc']:.3f} (4 classes, chance 0.25); rank 0 backpropagated "
            f"{stats.samples_yielded} of {stats.samples_seen} samples ({stats.backprop_fraction:.0%}) in "
            f"{stats.steps} batches, {stats.sb_steps} of them selected"
        )
    # Lightning leaves the DDP-wrapped model and the process group to the interpreter's exit, where torch 2.13 on the
    # CPU can free DDP's reducer after the group and abort ("terminate called without an active exception") once the
    # work is done: free the model while the group lives, then end the group
    del trainer, data
    gc.collect()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
