"""sbdata.integrations.transformers with the real Trainer: a tiny GPT-2 from a config (random weights, no hub),
synthetic token ids, gradient accumulation, per-rank checkpoints and an exact mid-epoch resume."""

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from sbdata.adapters import pad_right  # noqa: E402
from sbdata.integrations.transformers import SBTrainer, trainer_schedule  # noqa: E402

VOCAB, N, BATCH = 32, 48, 8


class Sequences(torch.utils.data.Dataset):
    """Sequences of 4..12 token ids; half follow ``t+1 = t+1 mod V`` (learnable), half are random."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.items = []
        for i in range(N):
            length = int(torch.randint(4, 13, (1,), generator=generator))
            if i % 2:
                tokens = torch.randint(0, VOCAB, (length,), generator=generator)
            else:
                tokens = (torch.arange(length) + i) % VOCAB
            self.items.append(tokens)

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.items[index], "index": index}


class RecordingTrainer(SBTrainer):
    """Records the first token of every sequence each training step sees (the sequences are told apart by it)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[list[int]] = []

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.seen.append(inputs["input_ids"][:, :3].tolist())
        return super().training_step(model, inputs, num_items_in_batch)


def make_trainer(output_dir, sb_options=None, **overrides) -> RecordingTrainer:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    options = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": BATCH,
        "gradient_accumulation_steps": 2,
        "num_train_epochs": 2,
        "learning_rate": 1e-2,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "seed": 0,
        "remove_unused_columns": False,
        "disable_tqdm": True,
        **overrides,
    }
    args = transformers.TrainingArguments(**options)
    return RecordingTrainer(
        model=model,
        args=args,
        train_dataset=Sequences(),
        data_collator=pad_right,
        sb_options={"keep": 0.5, **(sb_options or {})},
    )


def test_sbtrainer_trains_on_the_kept_half_with_gradient_accumulation(tmp_path):
    trainer = make_trainer(tmp_path)
    trainer.train()
    assert [len(step) for step in trainer.seen] == [math.ceil(0.5 * BATCH)] * (2 * N // BATCH)
    assert trainer.state.global_step == 2 * N // BATCH // 2  # one optimizer step per two micro-batches
    stats = trainer.sb.stats
    assert stats.sb_steps == stats.steps == 2 * N // BATCH and stats.backprop_fraction == 0.5
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logged and all(entry["sb/backprop_fraction"] == 0.5 for entry in logged)
    assert all(entry["sb/mean_loss_kept"] >= entry["sb/mean_loss_dropped"] for entry in logged)


def test_trainer_schedule_runs_on_the_trainers_progress(tmp_path):
    trainer = make_trainer(tmp_path, sb_options={"schedule": trainer_schedule(start=0.5, end=1.0, interrupt=0)})
    trainer.train()
    sizes = [len(step) for step in trainer.seen]  # 12 micro-batches, 6 optimizer steps: selection from step 3 on
    assert sizes == [BATCH] * 6 + [BATCH // 2] * 6


def test_resume_from_checkpoint_mid_epoch_continues_exactly(tmp_path):
    full = make_trainer(tmp_path / "full", save_strategy="steps", save_steps=4)
    full.train()
    checkpoint = tmp_path / "full" / "checkpoint-4"  # 8 micro-batches in: 2 into epoch 1 (6 per epoch)
    assert (checkpoint / "sbdata_rank0.pt").is_file()
    resumed = make_trainer(tmp_path / "full", save_strategy="no")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.seen == full.seen[8:]
    assert resumed.sb.stats.steps == full.sb.stats.steps


def test_ignore_data_skip_warns_that_the_saved_epoch_continues(tmp_path):
    full = make_trainer(tmp_path / "full", save_strategy="steps", save_steps=4)
    full.train()
    resumed = make_trainer(tmp_path / "full", save_strategy="no", ignore_data_skip=True)
    with pytest.warns(UserWarning, match="ignore_data_skip=True .* continues that epoch exactly"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-4"))
    assert resumed.seen == full.seen[8:]  # what the warning says: the saved epoch continues exactly


def test_pooled_batches_are_refused_naming_the_fix(tmp_path):
    with pytest.raises(ValueError, match="cannot take batch_size="):
        SBTrainer(
            model=torch.nn.Linear(1, 1),
            args=transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[]),
            sb_options={"batch_size": 4},
        )
