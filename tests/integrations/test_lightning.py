"""sbdata.integrations.lightning with the real Lightning: one process and Lightning's own 2-process DDP launcher
(strategy="ddp", CPU), under hard timeouts: disjoint shards, reshuffled epochs, exact resume per rank, warnings."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBLoader
from tests.jobs import JOBS
from tests.launch import run_job

pl = pytest.importorskip("lightning.pytorch")

JOB = str(JOBS / "lightning_job.py")


def reports(out, phase, world):
    return [json.loads((out / f"{phase}_rank{rank}.json").read_text()) for rank in range(world)]


def resume_matches(out, steps, world, *extra):
    """Resume from the checkpoint of each of ``steps`` (in one launch: on one device, the job resumes from each in
    turn, afresh) and check each resumed run against the uninterrupted one."""
    checkpoints = [str(out / "ckpt" / f"step={step}.ckpt") for step in steps]
    run_job([JOB, "--out", str(out), "--devices", str(world), "--phase", "resume", "--ckpt", *checkpoints, *extra])
    for step in steps:
        resumed_reports = reports(out, f"resume_step={step}", world)
        for full, resumed in zip(reports(out, "full", world), resumed_reports, strict=True):
            assert resumed["batches"] == full["batches"][step:]  # one optimizer step per batch: step = batches done
            assert resumed["steps"] == full["steps"]
            assert resumed["fit_warnings"] == []


@pytest.mark.multiprocess
@pytest.mark.slow
def test_one_process_resumes_exactly_mid_epoch_and_at_an_epoch_end(tmp_path):
    run_job([JOB, "--out", str(tmp_path), "--no-shuffle"])
    (full,) = reports(tmp_path, "full", 1)
    assert full["seen"] == 2 * 64 and len(full["batches"]) == 16
    assert all(len(ids) == 4 for _, ids in full["batches"])  # keep=0.5 of 8
    assert full["fit_warnings"] == [] and full["plain_sbloader_warned"] == []  # no prefetch, no read-ahead
    assert full["logged"] == ["sb/backprop_fraction", "sb/mean_loss_dropped", "sb/mean_loss_kept", "sb/sb_steps"]
    # 2 batches into epoch 1 (8 per epoch), and saved after the last batch of epoch 0
    resume_matches(tmp_path, [10, 8], 1, "--no-shuffle")


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_process_ddp_shards_reshuffles_and_resumes_per_rank(tmp_path):
    run_job([JOB, "--out", str(tmp_path), "--devices", "2"], timeout=600)
    ranks = reports(tmp_path, "full", 2)
    for report in ranks:
        assert report["world"] == 2 and report["seen"] == 64  # each rank reads half the data per epoch
        epochs = [sorted(i for e, ids in report["batches"] if e == epoch for i in ids) for epoch in range(2)]
        assert epochs[0] != epochs[1]  # set_epoch reached the DistributedSampler: epochs reshuffle
        assert any("every rank would train on the same data" in m for m in report["plain_sbloader_warned"])
        assert report["fit_warnings"] == []
    for epoch in range(2):
        kept = [i for report in ranks for e, ids in report["batches"] if e == epoch for i in ids]
        assert len(kept) == len(set(kept)) == 32  # disjoint across ranks
    resume_matches(tmp_path, [6], 2)  # 2 batches into epoch 1 (4 per rank per epoch)


class Tiny(pl.LightningModule):
    def __init__(self, make_loader) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 3)
        self.make_loader = make_loader

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)

    def train_dataloader(self):
        return self.make_loader(self)


def quiet_trainer(**options) -> pl.Trainer:
    """A one-device CPU Trainer with no logger, progress bar, summary or checkpoints (``options`` added)."""
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        **options,
    )


def fit(make_loader) -> None:
    quiet_trainer(max_epochs=1).fit(Tiny(make_loader))


def data() -> DataLoader:
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)


def test_a_plain_pooled_sbloader_under_lightning_warns_that_it_is_read_ahead():
    """Lightning prefetches one batch from a loader without len() (a variable-count policy in a pool): every batch
    is scored one step stale."""
    with pytest.warns(RuntimeWarning, match="reads batches ahead"):
        fit(lambda module: SBLoader(data(), module, F.cross_entropy, keep=0.5, policy="history", batch_size=4))


def test_the_integration_refuses_a_pooled_loader_without_len_naming_the_fix():
    from sbdata.integrations.lightning import sb_train_dataloader

    with pytest.raises(ValueError, match="Lightning prefetches one batch.*make len\\(\\) known"):
        fit(
            lambda module: sb_train_dataloader(
                module.trainer, data(), F.cross_entropy, keep=0.5, policy="history", batch_size=4
            )
        )


def test_a_pooled_loader_with_a_fixed_count_policy_has_len_and_is_not_read_ahead():
    """With a fixed-count policy a pool's batches per epoch are known (len()), so Lightning does not prefetch: no
    read-ahead warning, and the integration takes it."""
    import warnings

    from sbdata.integrations.lightning import sb_train_dataloader

    loaders = []

    def make(module):
        loaders.append(sb_train_dataloader(module.trainer, data(), F.cross_entropy, keep=0.5, batch_size=4))
        return loaders[-1]

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fit(make)
    assert [w for w in record if "reads batches ahead" in str(w.message)] == []
    assert len(loaders[0]) == 8 and loaders[0].stats.samples_yielded == 32  # 64 samples, half kept, 8 x 4


class Counting(Tiny):
    def __init__(self, make_loader) -> None:
        super().__init__(make_loader)
        self.sizes: list[int] = []

    def training_step(self, batch, batch_idx):
        self.sizes.append(len(batch[0]))
        return super().training_step(batch, batch_idx)


@pytest.mark.filterwarnings("ignore:You requested to overfit")  # Lightning's own, before sbdata stops it
@pytest.mark.parametrize("shuffle", [False, True])
def test_overfit_batches_keeps_selection_or_stops_naming_shuffle_false(shuffle):
    """Lightning's overfit_batches rebuilds a shuffling training loader from its dataset (which would drop
    selection): sbdata stops it before any step, naming shuffle=False; without shuffling Lightning keeps the
    SBLoader, which selects on the overfit batches."""
    module = Counting(
        lambda module: SBLoader(
            DataLoader(data().dataset, batch_size=8, shuffle=shuffle), module, F.cross_entropy, keep=0.5
        )
    )
    trainer = quiet_trainer(max_epochs=2, overfit_batches=2)
    if shuffle:
        with pytest.raises(
            RuntimeError, match="overfit_batches.*Fix: build the training DataLoader with shuffle=False"
        ):
            trainer.fit(module)
        assert module.sizes == []  # stopped before training
    else:
        trainer.fit(module)
        assert module.sizes == [4, 4, 4, 4]  # 2 overfit batches per epoch, each the kept half of 8


@pytest.mark.parametrize(("keep", "run", "sizes"), [("auto", 16, {8}), ("long", 10_000, {2, 8})])
def test_keep_auto_is_told_the_runs_length_and_skips_a_trial_too_dear_for_it(keep, run, sizes):
    """2 epochs of 8 batches (64 samples, batch 8): Lightning plans 16 loader batches. keep="auto" sized to the
    epoch (warmup 8, windows of 2 + 2) would trial from batch 8 with 16 batches of selection windows, more than
    trial_share=0.125 of the 8 left: told the run, it decides whole batches without a trial. With the user's own
    (long) length the trial runs and its selection windows train on ceil(0.25 * 8) = 2 samples."""
    import warnings

    from sbdata import Auto
    from sbdata.integrations.lightning import sb_train_dataloader

    loaders = []

    def make(module):
        given = Auto(run=run) if keep == "long" else keep
        loaders.append(sb_train_dataloader(module.trainer, data(), F.cross_entropy, keep=given))
        return loaders[-1]

    module = Counting(make)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        quiet_trainer(max_epochs=2).fit(module)
    told = [str(w.message) for w in record if "sbdata keep='auto'" in str(w.message)]
    assert any("no trial" in message and "run of 16" in message for message in told) == (keep == "auto")
    assert loaders[0].engine.keep.auto.run == run
    assert set(module.sizes) == sizes
    assert ("no trial" in loaders[0].stats.auto_reason) == (keep == "auto")
