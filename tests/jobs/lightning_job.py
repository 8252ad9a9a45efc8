"""A Lightning training job for the tests, on one CPU process or several (Lightning's own DDP launcher).

``--phase full`` trains two epochs through ``SBDataModule`` and checkpoints every two optimizer steps;
``--phase resume --ckpt PATH`` fits afresh from a checkpoint (a fresh seed, module, Trainer and data module: on one
device, ``--ckpt PATH PATH ...`` resumes from each in turn, one launch for several checkpoints). Each rank writes
``{phase}_rank{r}.json`` to ``--out`` (a resume ``resume_{checkpoint name}_rank{r}.json``): the sample ids of each
trained batch with its epoch, the samples each epoch read, and the warnings seen.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBLoader
from sbdata.integrations.lightning import SBDataModule, SBStatsLogger
from tests.launch import arm_watchdog

N, BATCH = 64, 8


class Data(pl.LightningDataModule):
    def __init__(self, shuffle: bool) -> None:
        super().__init__()
        self.shuffle = shuffle

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(N, 4, generator=generator)
        self.train = TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long(), torch.arange(N))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=BATCH, shuffle=self.shuffle)


class Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 3)
        self.batches: list = []
        self.warned: list[str] = []

    def forward(self, x):  # what selection scores: module(inputs)
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y, ids = batch
        self.batches.append([self.current_epoch, sorted(ids.tolist())])
        if len(self.batches) == 1:  # a user's plain SBLoader built now, under the process group, warns
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                SBLoader(DataLoader(self.trainer.datamodule.datamodule.train, batch_size=BATCH), self, F.cross_entropy)
            self.warned = [str(w.message) for w in record]
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def main() -> None:
    arm_watchdog()
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--phase", choices=["full", "resume"], default="full")
    parser.add_argument("--ckpt", nargs="+", default=[None], help="resume: the checkpoints, in turn (one device)")
    parser.add_argument("--no-shuffle", action="store_true", help="one process resumes exactly only without shuffle")
    args = parser.parse_args()
    if len(args.ckpt) > 1 and args.devices > 1:
        parser.error("several --ckpt resume in turn on one device only (Lightning's DDP launcher runs one fit)")
    for ckpt in args.ckpt:
        fit(args, Path(args.out), ckpt)


def fit(args: argparse.Namespace, out: Path, ckpt: str | None) -> None:
    """One fit, from the start or from ``ckpt``, as a fresh launch builds it; writes this rank's report."""
    pl.seed_everything(0, verbose=False)
    module = Module()
    checkpoints = ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=2, save_top_k=-1, filename="{step}")
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        callbacks=[checkpoints, SBStatsLogger()],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    datamodule = SBDataModule(Data(shuffle=not args.no_shuffle), F.cross_entropy, keep=0.5)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt)
    sb = trainer.train_dataloader
    report = {
        "rank": trainer.global_rank,
        "world": trainer.world_size,
        "batches": module.batches,
        "steps": sb.stats.steps,
        "seen": sb.stats.samples_seen,
        "plain_sbloader_warned": module.warned,
        "fit_warnings": [str(w.message) for w in record if "sbdata" in str(w.message)],
        "logged": sorted(key for key in trainer.callback_metrics if key.startswith("sb/")),
    }
    phase = args.phase if ckpt is None else f"resume_{Path(ckpt).stem}"
    (out / f"{phase}_rank{trainer.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
