"""sbdata.integrations.accelerate with the real Accelerate: prepare, then wrap; per-rank state in save_state."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBLoader

from .jobs import JOBS, run_job

pytest.importorskip("accelerate")


def read_reports(out, world):
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world)]


def check_job(reports, world):
    for report in reports:
        assert report["world"] == world
        full, resumed = report["full"], report["resumed"]
        assert full["seen"] == [64 // world] * 2  # each rank reads its shard, each epoch
        assert resumed["batches"] == full["batches"][full["saved_after"] :]  # resume continues exactly
        assert report["state_files"] == [f"sbdata_rank{rank}.pt" for rank in range(world)]
        epochs = [[ids for epoch, ids in full["batches"] if epoch == e] for e in range(2)]
        assert epochs[0] != epochs[1]  # epochs reshuffle
    for epoch in range(2):
        kept = [ids for report in reports for e, batch in report["full"]["batches"] if e == epoch for ids in batch]
        assert len(kept) == len(set(kept))  # ranks train on disjoint samples


def test_single_process_with_a_stateful_prepared_loader(tmp_path):
    run_job([str(JOBS / "accelerate_job.py"), "--out", str(tmp_path), "--stateful"])
    check_job(read_reports(tmp_path, 1), 1)


@pytest.mark.slow
def test_two_processes_shard_reshuffle_and_resume_per_rank(tmp_path):
    run_job([str(JOBS / "accelerate_job.py"), "--out", str(tmp_path), "--stateful"], nproc=2)
    reports = read_reports(tmp_path, 2)
    check_job(reports, 2)
    for report in reports:  # the wrong order: wrap, then prepare(sb), which passes the SBLoader through unsharded
        assert report["prepare_passes_sb_through"] and report["wrong_order_warned"]


@pytest.mark.slow
def test_two_processes_with_the_default_prepared_loader(tmp_path):
    """Accelerate's default DataLoaderShard has a state_dict() that raises: SB must treat it as stateless."""
    run_job([str(JOBS / "accelerate_job.py"), "--out", str(tmp_path)], nproc=2)
    check_job(read_reports(tmp_path, 2), 2)


def test_wrap_prepares_the_loader_and_refuses_an_sbloader():
    from accelerate import Accelerator

    from sbdata.integrations.accelerate import wrap

    accelerator = Accelerator(cpu=True)
    model = nn.Linear(2, 2)
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.zeros(8, dtype=torch.long)), batch_size=4)
    sb = wrap(accelerator, loader, model, F.cross_entropy, keep=0.5)
    assert type(sb.loader).__name__ == "DataLoaderShard"
    with pytest.raises(TypeError, match="prepare the DataLoader, then wrap it"):
        wrap(accelerator, SBLoader(loader, model, F.cross_entropy), model, F.cross_entropy)
