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
        assert "Prepare first, then wrap" in report["wrong_order_refused"]


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


def run_readme_setup(out, nproc):
    """The README's set-up (``Accelerator(cpu=True)``, a shuffled DataLoader), without and with ``generator=``,
    saved mid-epoch and resumed in a fresh launch (one launch per phase runs both set-ups): by set-up (``shuffle``,
    ``generator``), each rank's (uninterrupted, resumed) reports."""
    for phase in ("full", "resume"):
        job = [str(JOBS / "accelerate_readme_job.py"), "--out", str(out), "--phase", phase]
        run_job([*job, "--configs", "shuffle", "generator"], nproc=nproc)
    return {
        config: [
            tuple(json.loads((out / config / f"{phase}_rank{r}.json").read_text()) for phase in ("full", "resume"))
            for r in range(nproc)
        ]
        for config in ("shuffle", "generator")
    }


@pytest.fixture(scope="module")
def readme_setup_in_two_processes(tmp_path_factory):
    return run_readme_setup(tmp_path_factory.mktemp("readme2"), 2)


@pytest.mark.slow
@pytest.mark.parametrize("generator", [False, True], ids=["shuffle", "shuffle+generator"])
def test_readme_setup_in_two_processes_resumes_exactly_without_a_warning(readme_setup_in_two_processes, generator):
    """Accelerate seeds the shuffling sampler of a sharded loader itself (and wraps the batch sampler in its
    BatchSamplerShard), so the order is replayable with or without generator=: no warning, and an exact resume."""
    runs = readme_setup_in_two_processes["generator" if generator else "shuffle"]
    assert len(runs) == 2
    for full, resumed in runs:
        assert len(full["after_save"]) == 2  # 4 batches per rank and epoch; saved after batch 1 of epoch 1
        assert resumed["after_save"] == full["after_save"]  # the same ids in every batch after the save
        assert resumed["weights"] == full["weights"]  # bit for bit
        assert full["warnings"] == [] and resumed["warnings"] == []


@pytest.mark.slow
@pytest.mark.multiprocess
def test_readme_setup_in_one_process_resumes_exactly_without_a_generator(tmp_path):
    """In one process prepare leaves the DataLoader's RandomSampler unseeded (the global RNG would draw each epoch's
    order): wrap gives it a generator, so the resume is exact with or without generator=, and nothing warns."""
    runs = run_readme_setup(tmp_path, 1)
    for name in ("shuffle", "generator"):
        [(full, resumed)] = runs[name]
        assert len(full["after_save"]) == 6  # 8 batches per epoch; saved after batch 1 of epoch 1
        assert resumed["after_save"] == full["after_save"] and resumed["weights"] == full["weights"]
        assert full["warnings"] == [] and resumed["warnings"] == []


def run_no_trainer_script(out, nproc):
    """The public no-trainer script shape: an uninterrupted run checkpointing every 2 steps, then two fresh
    launches resuming from step_6 (mid-epoch) and step_8 (the end of an epoch, in 1 and in 2 processes)."""
    script = str(JOBS / "accelerate_no_trainer_job.py")
    run_job([script, "--out", str(out), "--tag", "full", "--checkpointing_steps", "2"], nproc=nproc)
    for tag, step in (("mid", 6), ("edge", 8)):
        resume = ["--resume_from_checkpoint", str(out / f"step_{step}")]
        run_job([script, "--out", str(out), "--tag", tag, *resume], nproc=nproc)
    return [
        {tag: json.loads((out / f"{tag}_rank{rank}.json").read_text()) for tag in ("full", "mid", "edge")}
        for rank in range(nproc)
    ]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("nproc", [1, 2])
def test_the_public_no_trainer_script_shape_resumes_exactly(tmp_path, nproc):
    """load_state + skip_first_batches(train_dataloader, resume_step) + a scheduler sized from len(train_dataloader),
    with wrap as the only glue: the resumed steps train on the uninterrupted run's samples, at its learning rates,
    and end on its weights bit for bit (dropout included), from mid-epoch and from an epoch's end."""
    for runs in run_no_trainer_script(tmp_path, nproc):
        full = runs["full"]
        assert full["len"] == 8 // nproc and full["dataset_len"] == 64  # loader batches per epoch; samples
        assert full["max_train_steps"] == 3 * 8 // nproc and len(full["steps"]) == full["max_train_steps"]
        assert all(len(ids) == 4 for _, _, ids, _ in full["steps"])  # keep=0.5 of 8
        for tag, step in (("mid", 6), ("edge", 8)):
            assert runs[tag]["steps"] == [entry for entry in full["steps"] if entry[0] > step], tag
            assert runs[tag]["weights"] == full["weights"], tag
            assert runs[tag]["warnings"] == [], tag
        assert full["warnings"] == []


def test_skip_first_batches_hands_the_wrapped_loader_back_and_touches_nothing_else():
    """wrap patches that accelerator's skip_first_batches only (not the class, not another accelerator), hands
    back only its own SBLoader, and refuses a skip that no loaded state stands behind."""
    from accelerate import Accelerator

    from sbdata.integrations.accelerate import wrap

    accelerator, other = Accelerator(cpu=True), Accelerator(cpu=True)
    model = nn.Linear(2, 2)
    data = TensorDataset(torch.randn(16, 2), torch.zeros(16, dtype=torch.long))
    sb = wrap(accelerator, DataLoader(data, batch_size=4, shuffle=True), model, F.cross_entropy, keep=0.5)
    assert accelerator.skip_first_batches(sb, 0) is sb
    with pytest.raises(RuntimeError, match=r"skip_first_batches\(sb, 2\).*none was loaded.*load_state"):
        accelerator.skip_first_batches(sb, 2)
    plain = accelerator.prepare(DataLoader(data, batch_size=4))
    rebuilt = accelerator.skip_first_batches(plain, 2)  # any other loader: the stock method, which rebuilds it
    assert rebuilt is not plain and len(list(rebuilt)) == 2
    assert "skip_first_batches" in vars(accelerator) and "skip_first_batches" not in vars(other)
    assert Accelerator.skip_first_batches.__module__ == "accelerate.accelerator"
    with pytest.raises(RuntimeError, match=r"accelerate's skip_first_batches rebuilds.*wrap\(accelerator"):
        other.skip_first_batches(sb, 2)  # another accelerator's stock method stops, naming wrap


def test_skip_first_batches_checks_where_the_loaded_state_stands(tmp_path):
    """After load_state, skipping resume_step batches hands the loader back when the state stands there, and
    names the mismatch otherwise (a checkpoint from another script configuration)."""
    from accelerate import Accelerator

    from sbdata.integrations.accelerate import wrap

    def build():
        accelerator = Accelerator(cpu=True)
        model = nn.Linear(2, 2)
        x = torch.randn(32, 2, generator=torch.Generator().manual_seed(0))
        data = TensorDataset(x, torch.zeros(32, dtype=torch.long), torch.arange(32))
        loader = DataLoader(data, batch_size=4, shuffle=True)
        model, loader = accelerator.prepare(model, loader)
        return accelerator, wrap(accelerator, loader, model, F.cross_entropy, keep=0.5)

    accelerator, sb = build()
    batches = iter(sb)
    head = [next(batches)[2].tolist() for _ in range(3)]
    accelerator.save_state(tmp_path / "ckpt")
    rest = [batch[2].tolist() for batch in batches]
    accelerator, resumed = build()
    accelerator.load_state(tmp_path / "ckpt")
    with pytest.raises(RuntimeError, match=r"resumes 2 batches into the epoch.*saved after 3"):
        accelerator.skip_first_batches(resumed, 2)
    assert accelerator.skip_first_batches(resumed, 3) is resumed
    assert [batch[2].tolist() for batch in resumed] == rest and len(head + rest) == 8


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


def test_the_generator_warning_names_the_users_save_state_line(tmp_path):
    """Without wrap (an SBLoader registered for checkpointing), a one-process shuffle without generator= cannot be
    replayed: the warning raised inside accelerator.save_state names the user's line, not accelerate's."""
    import warnings

    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = nn.Linear(2, 2)
    data = TensorDataset(torch.randn(16, 2), torch.zeros(16, dtype=torch.long))
    model, loader = accelerator.prepare(model, DataLoader(data, batch_size=4, shuffle=True))
    sb = SBLoader(loader, model, F.cross_entropy, keep=0.5)
    accelerator.register_for_checkpointing(sb)
    next(iter(sb))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        accelerator.save_state(tmp_path / "ckpt")  # the user's line
    [warning] = [w for w in record if "generator=" in str(w.message)]
    assert "cannot make this checkpoint resume in the same order" in str(warning.message)
    assert warning.filename == __file__
    with open(__file__) as source:
        assert "the user's line" in source.read().splitlines()[warning.lineno - 1]


@pytest.mark.parametrize("n", [32, 30, 26])
def test_len_of_a_pool_over_accelerates_even_shards_is_the_batches_yielded(n):
    """Under several processes a prepared loader deals batches through a BatchSamplerShard that loops back to give
    every process full batches (even_batches): len() of a pool counts them, so a public script's
    len(train_dataloader) is exact. Here rank 0 of 2, built as prepare builds it."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler

    data = TensorDataset(torch.randn(n, 2), torch.zeros(n, dtype=torch.long))
    shard = BatchSamplerShard(BatchSampler(SequentialSampler(data), 4, drop_last=False), num_processes=2)
    sb = SBLoader(DataLoader(data, batch_sampler=shard), nn.Linear(2, 2), F.cross_entropy, keep=0.5, batch_size=3)
    assert len(sb) == len(list(sb)) == len(list(sb))  # 2 kept of every full batch of 4, in batches of 3


@pytest.mark.parametrize("stateful", [False, True], ids=["default", "use_stateful_dataloader"])
def test_a_checkpoint_after_an_epochs_last_batch_resumes_at_the_next_epoch(tmp_path, stateful):
    """The public script saves inside its loop, after the epoch's last batch, and resumes with resume_step == 0 at
    the next epoch: skip_first_batches(sb, 0) ends the spent epoch, so the next pass is the next epoch (for the
    default loader, the uninterrupted run's very batches; a stateful loader starts its own next epoch)."""
    from accelerate import Accelerator, DataLoaderConfiguration

    from sbdata.integrations.accelerate import wrap

    def build():
        config = DataLoaderConfiguration(use_stateful_dataloader=stateful)
        accelerator = Accelerator(cpu=True, dataloader_config=config)
        x = torch.randn(32, 2, generator=torch.Generator().manual_seed(0))
        data = TensorDataset(x, torch.zeros(32, dtype=torch.long), torch.arange(32))
        model, loader = accelerator.prepare(nn.Linear(2, 2), DataLoader(data, batch_size=4, shuffle=True))
        return accelerator, wrap(accelerator, loader, model, F.cross_entropy, keep=0.5)

    import warnings

    accelerator, sb = build()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for index, _ in enumerate(sb):
            if index == 7:  # the epoch's last batch
                accelerator.save_state(tmp_path / "ckpt")
    # torch's RandomSampler under a StatefulDataLoader: its generator is not in the loader's state (torchdata's)
    said = [w for w in record if "is not stateful" in str(w.message)]
    assert [w.filename for w in said] == ([__file__] if stateful else [])
    following = [batch[2].tolist() for batch in sb]
    accelerator, resumed = build()
    accelerator.load_state(tmp_path / "ckpt")
    assert accelerator.skip_first_batches(resumed, 0) is resumed
    got = [batch[2].tolist() for batch in resumed]
    assert len(got) == 8 and resumed.engine.epoch == 1
    if not stateful:
        assert got == following


def test_the_wrong_order_under_several_processes_is_refused_naming_the_fix(monkeypatch):
    """``accelerator.prepare(SBLoader(loader, ...))``: sbdata runs first (Accelerate passes the SBLoader through
    unsharded), so the SBLoader refuses, at construction, an unprepared loader under an Accelerator of several
    processes. Two processes are simulated (torch.distributed's world of 2, Accelerate's state initialised)."""
    import accelerate.state

    from sbdata._front import _guards

    data = TensorDataset(torch.randn(8, 2), torch.zeros(8, dtype=torch.long))
    monkeypatch.setattr(_guards, "rank_and_world", lambda: (0, 2))
    monkeypatch.setattr(accelerate.state, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError) as refused:
        SBLoader(DataLoader(data, batch_size=4, shuffle=True), nn.Linear(2, 2), F.cross_entropy, keep=0.5)
    message = str(refused.value)
    assert "Accelerate runs 2 processes" in message and "every process would train on the same data" in message
    assert "Prepare first, then wrap: loader = accelerator.prepare(loader)" in message
    monkeypatch.setattr(accelerate.state, "is_initialized", lambda: False)  # torch.distributed without Accelerate
    with pytest.warns(RuntimeWarning, match="every rank would train on the same data"):
        SBLoader(DataLoader(data, batch_size=4, shuffle=True), nn.Linear(2, 2), F.cross_entropy, keep=0.5)
