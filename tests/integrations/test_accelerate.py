"""sbdata.integrations.accelerate with the real Accelerate: prepare, then wrap; per-rank state in save_state."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBLoader
from tests.jobs import JOBS
from tests.launch import run_job

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


@pytest.mark.multiprocess
def test_single_process_with_a_stateful_prepared_loader(tmp_path):
    run_job([str(JOBS / "accelerate_job.py"), "--out", str(tmp_path), "--stateful"])
    check_job(read_reports(tmp_path, 1), 1)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_processes_shard_reshuffle_and_resume_per_rank(tmp_path):
    run_job([str(JOBS / "accelerate_job.py"), "--out", str(tmp_path), "--stateful"], nproc=2)
    reports = read_reports(tmp_path, 2)
    check_job(reports, 2)
    for report in reports:  # the wrong order: wrap, then prepare(sb), which passes the SBLoader through unsharded
        assert report["prepare_passes_sb_through"] and report["wrong_order_warned"]


@pytest.mark.multiprocess
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


def run_readme_setup(out, nproc, generator):
    """The README's set-up (``Accelerator(cpu=True)``, a shuffled DataLoader), saved mid-epoch and resumed in a
    fresh launch: returns each rank's (uninterrupted, resumed) reports."""
    flags = ["--generator"] if generator else []
    for phase in ("full", "resume"):
        run_job([str(JOBS / "accelerate_readme_job.py"), "--out", str(out), "--phase", phase, *flags], nproc=nproc)
    return [
        (json.loads((out / f"full_rank{r}.json").read_text()), json.loads((out / f"resume_rank{r}.json").read_text()))
        for r in range(nproc)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("generator", [False, True], ids=["shuffle", "shuffle+generator"])
def test_readme_setup_in_two_processes_resumes_exactly_without_a_warning(tmp_path, generator):
    """Accelerate seeds the shuffling sampler of a sharded loader itself (and wraps the batch sampler in its
    BatchSamplerShard), so the order is replayable with or without generator=: no warning, and an exact resume."""
    for full, resumed in run_readme_setup(tmp_path, 2, generator):
        assert len(full["after_save"]) == 2  # 4 batches per rank and epoch; saved after batch 1 of epoch 1
        assert resumed["after_save"] == full["after_save"]  # the same ids in every batch after the save
        assert resumed["weights"] == full["weights"]  # bit for bit
        assert full["warnings"] == [] and resumed["warnings"] == []


@pytest.mark.slow
def test_readme_setup_in_one_process_warns_only_without_a_generator(tmp_path):
    """In one process prepare leaves the DataLoader's RandomSampler unseeded: the global RNG draws each epoch's
    order, so the resume really differs, and the warning says so, naming generator=; with it the resume is exact."""
    [(full, resumed)] = run_readme_setup(tmp_path / "plain", 1, generator=False)
    assert resumed["after_save"] != full["after_save"]
    [warning] = full["warnings"]
    assert "cannot make this checkpoint resume in the same order" in warning and "generator=" in warning
    [(full, resumed)] = run_readme_setup(tmp_path / "seeded", 1, generator=True)
    assert resumed["after_save"] == full["after_save"] and resumed["weights"] == full["weights"]
    assert full["warnings"] == [] and resumed["warnings"] == []


def test_a_sharded_batch_sampler_is_read_through_for_the_shuffle_generator():
    """In one process, the loader prepare builds for rank 0 of 2: sbdata records the generator of the RandomSampler
    inside accelerate's BatchSamplerShard (no warning) and replays its order on resume, here in epoch 1."""
    import warnings

    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, RandomSampler

    data = TensorDataset(torch.randn(32, 2), torch.zeros(32, dtype=torch.long), torch.arange(32))
    model = nn.Linear(2, 2)

    def build():
        sampler = RandomSampler(data, generator=torch.Generator().manual_seed(0))
        shard = BatchSamplerShard(BatchSampler(sampler, 4, drop_last=False), num_processes=2, process_index=0)
        return SBLoader(DataLoader(data, batch_sampler=shard), model, F.cross_entropy, keep=0.5)

    def ids(batches):
        return [sorted(batch[2].tolist()) for batch in batches]

    sb = build()
    list(sb)  # epoch 0
    epoch = iter(sb)
    head = ids([next(epoch), next(epoch)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = sb.state_dict()
    rest = ids(epoch)
    resumed = build()
    resumed.load_state_dict(state)
    assert ids(resumed) == rest and len(head + rest) == 4
    assert head + rest != ids(build())  # epoch 1 is not epoch 0's order: the generator's state was restored
