"""sbdata.integrations.transformers with the real Trainer: a tiny GPT-2 from a config (random weights, no hub),
synthetic token ids, gradient accumulation, per-rank checkpoints and an exact mid-epoch resume."""

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from sbdata.integrations.transformers import SBTrainer, trainer_schedule  # noqa: E402
from sbdata.tasks import pad_right  # noqa: E402

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


# --- tasks other than causal LM, and a Trainer subclass of one's own ---------------------------------------------

LENGTH = 6


class Tokens(torch.utils.data.Dataset):
    """Fixed-length sequences whose first token is the sample's index (told apart by it), with the labels of a
    task: ``"causal_lm"`` (the ids, as labels), ``"sequence_classification"`` (a class), ``"token_classification"``
    (a class per token, the last two tokens of odd samples unlabelled)."""

    def __init__(self, task: str, samples: int = 16) -> None:
        generator = torch.Generator().manual_seed(1)
        self.items = []
        for i in range(samples):
            ids = torch.cat([torch.tensor([i]), torch.randint(0, VOCAB, (LENGTH - 1,), generator=generator)])
            item = {"input_ids": ids, "attention_mask": torch.ones(LENGTH, dtype=torch.long)}
            if task == "causal_lm":
                item["labels"] = ids.clone()
            elif task == "sequence_classification":
                item["labels"] = int(torch.randint(0, 3, (), generator=generator))
            elif task == "token_classification":
                labels = torch.randint(0, 3, (LENGTH,), generator=generator)
                item["labels"] = labels.masked_fill(torch.arange(LENGTH) >= LENGTH - 2, -100) if i % 2 else labels
            self.items.append(item)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        return self.items[index]


def tiny_model(task: str):
    torch.manual_seed(0)
    if task == "causal_lm":
        return transformers.GPT2LMHeadModel(
            transformers.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=16, n_layer=1, n_head=2)
        )
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=16, num_labels=3,
    )  # fmt: skip
    if task == "sequence_classification":
        return transformers.BertForSequenceClassification(config)
    return transformers.BertForTokenClassification(config)


def hand_losses(model, batch: dict, task: str) -> torch.Tensor:
    """Each sample's loss as the model's task defines it, computed here without sbdata."""
    with torch.no_grad():
        logits = model.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    if task == "sequence_classification":
        return torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="none")
    if task == "causal_lm":
        logits, targets = logits[:, :-1], batch["input_ids"][:, 1:]
    else:
        targets = batch["labels"]
    losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none", ignore_index=-100)
    return losses.sum(1) / (targets != -100).sum(1)


class Collating:
    """``default_data_collator`` that records every loader batch it builds, in order."""

    def __init__(self) -> None:
        self.batches: list[dict] = []

    def __call__(self, features):
        batch = transformers.default_data_collator(features)
        self.batches.append({key: value.clone() for key, value in batch.items()})
        return batch


def task_args(output_dir, **overrides):
    options = {
        "output_dir": str(output_dir), "per_device_train_batch_size": 4, "num_train_epochs": 1, "report_to": [],
        "use_cpu": True, "seed": 0, "disable_tqdm": True, "save_strategy": "no", **overrides,
    }  # fmt: skip
    return transformers.TrainingArguments(**options)


@pytest.mark.parametrize("task", ["causal_lm", "sequence_classification", "token_classification"])
def test_sbtrainer_scores_with_the_loss_of_the_models_task(tmp_path, task):
    """With learning_rate=0 the model never moves, so each kept half is known: the samples of highest per-sample
    loss (as the task defines it) in its loader batch."""
    model, collate = tiny_model(task), Collating()

    class Recording(SBTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            kept.append(inputs["input_ids"][:, 0].tolist())
            return super().training_step(model, inputs, num_items_in_batch)

    kept: list[list[int]] = []
    trainer = Recording(
        model=model, args=task_args(tmp_path, learning_rate=0.0), train_dataset=Tokens(task), data_collator=collate,
        sb_options={"keep": 0.5},
    )  # fmt: skip
    trainer.train()
    assert len(kept) == len(collate.batches) == 4
    for batch, ids in zip(collate.batches, kept, strict=True):
        losses = hand_losses(model, batch, task)
        hardest = losses.argsort(descending=True)[:2]
        assert sorted(ids) == sorted(batch["input_ids"][hardest, 0].tolist())


def test_a_model_of_no_known_task_is_refused_at_construction_naming_loss_fn(tmp_path):
    with pytest.raises(ValueError, match=r'Linear.*sb_options\["loss_fn"\]'):
        SBTrainer(model=torch.nn.Linear(1, 1), args=task_args(tmp_path), sb_options={"keep": 0.5})
    SBTrainer(model=torch.nn.Linear(1, 1), args=task_args(tmp_path), sb_options={"loss_fn": lambda *a, **k: None})


def test_a_trainer_subclass_returning_an_sbloader_refuses_to_resume_naming_sbtrainer(tmp_path):
    """What a user writes before finding SBTrainer trains, but cannot resume mid-epoch: its selection state is not
    in the checkpoint, and the Trainer would rebuild the loader without selection. It says so before any step."""
    from sbdata import SBLoader
    from sbdata.tasks import causal_lm

    steps: list[int] = []

    class Own(transformers.Trainer):
        def get_train_dataloader(self):
            return SBLoader(super().get_train_dataloader(), self.model, keep=0.5, **causal_lm())

        def training_step(self, model, inputs, num_items_in_batch=None):
            steps.append(len(inputs["input_ids"]))
            return super().training_step(model, inputs, num_items_in_batch)

    def make(**overrides):
        return Own(
            model=tiny_model("causal_lm"), args=task_args(tmp_path, **overrides), train_dataset=Tokens("causal_lm"),
            data_collator=transformers.default_data_collator,
        )  # fmt: skip

    make(save_strategy="steps", save_steps=2).train()
    assert steps == [2, 2, 2, 2]  # it trains, on the kept halves
    steps.clear()
    with pytest.raises(
        RuntimeError, match=r"Transformers Trainer resumes mid-epoch.*derive from .*SBTrainer.*sb_options"
    ):
        make().train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert steps == []


def test_keep_auto_is_told_the_runs_length_and_skips_a_trial_too_dear_for_it(tmp_path):
    """2 epochs of 6 micro-batches (48 sequences, batch 8): the Trainer plans 12 loader batches. keep="auto" sized
    to the epoch (warmup 6, windows of 2 + 2) would trial from batch 6 with 16 batches of selection windows, more
    than trial_share=0.125 of the 6 left: told the run, it decides whole batches without a trial."""
    trainer = make_trainer(tmp_path, sb_options={"keep": "auto"})
    with pytest.warns(UserWarning, match="no trial.*6 batches left in this run of 12"):
        trainer.train()
    assert trainer.sb.engine.keep.auto.run == 12
    assert "no trial" in trainer.sb.stats.auto_reason
    assert [len(step) for step in trainer.seen] == [BATCH] * 12


def test_a_run_length_the_user_gave_keep_auto_stands(tmp_path):
    """The same run with Auto(run=...) given: the user's length stands (here a long one, so the trial runs and
    its selection windows train on ceil(0.25 * 8) = 2 sequences)."""
    from sbdata import Auto

    trainer = make_trainer(tmp_path, sb_options={"keep": Auto(run=10_000)})
    trainer.train()
    assert trainer.sb.engine.keep.auto.run == 10_000
    assert 2 in [len(step) for step in trainer.seen]
