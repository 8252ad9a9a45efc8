"""Selective Backprop in the Hugging Face Transformers Trainer: a tiny GPT-2 built from a config (random weights,
no download) learns synthetic token sequences, training only on the half of each batch it finds hardest.

Each sequence counts upwards modulo the vocabulary with a stride of 1, 2, 3 or 4 (``t, t+s, t+2s, ...``); the
stride must be read from the first tokens, so later tokens are predictable and some strides are learnt before
others. The script prints the Trainer's loss with what selection kept, then the per-token loss of each stride.
Selection ranks by the mean loss over each sequence's real tokens (``sbdata.tasks.causal_lm``), so padding does
not make short sequences look easy.

Beware data that cannot be learnt (random tokens, wrong labels): their loss stays highest, so selection by loss
keeps them; see ``docs/method_card.md`` (``ReducibleSelect``).

Needs the ``transformers`` extra (``pip install -e ".[transformers]"`` from the clone's root). Run from the clone's
root::

    python examples/hf_trainer.py
    torchrun --nproc_per_node=2 examples/hf_trainer.py      # two processes, each its own shard
"""

from __future__ import annotations

import argparse
import tempfile

import torch

from sbdata.tasks import causal_lm, pad_right

try:
    from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

    from sbdata.integrations.transformers import SBTrainer
except ImportError as error:  # --help works without the extra; running names it
    MISSING: ImportError | None = error
else:
    MISSING = None

VOCAB = 16


class Sequences(torch.utils.data.Dataset):
    def __init__(self, samples: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.items = []
        for i in range(samples):
            length = int(torch.randint(8, 25, (1,), generator=generator))
            start = int(torch.randint(0, VOCAB, (1,), generator=generator))
            self.items.append((start + torch.arange(length) * (1 + i % 4)) % VOCAB)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.items[index]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--keep", type=float, default=0.5)
    args = parser.parse_args()
    if MISSING is not None:
        raise SystemExit(f'{MISSING}: this example needs the transformers extra: pip install -e ".[transformers]"')
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, n_positions=32, n_embd=32, n_layer=1, n_head=2
        )
    )
    train = Sequences(args.samples)
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = TrainingArguments(
            output_dir=output_dir,
            per_device_train_batch_size=32,
            gradient_accumulation_steps=2,
            num_train_epochs=args.epochs,
            learning_rate=2e-2,
            logging_steps=4,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
            seed=0,
        )
        trainer = SBTrainer(
            model=model,
            args=training_args,
            train_dataset=train,
            data_collator=pad_right,
            sb_options={"keep": args.keep},
        )
        trainer.train()
    if not trainer.is_world_process_zero():
        return
    for entry in trainer.state.log_history:
        if "loss" in entry:
            print(
                f"step {entry['step']:3d}  loss {entry['loss']:.3f}  backprop {entry['sb/backprop_fraction']:.2f}  "
                f"kept {entry['sb/mean_loss_kept']:.3f} vs dropped {entry['sb/mean_loss_dropped']:.3f}"
            )
    adapter = causal_lm()
    model.eval()
    per_stride = []
    for stride in range(1, 5):
        batch = pad_right([train[i] for i in range(stride - 1, len(train), 4)])
        inputs, labels = adapter["split"](batch)
        with torch.no_grad():
            losses = adapter["reduce"](adapter["loss_fn"](adapter["forward"](model, inputs), labels), labels)
        per_stride.append(f"stride {stride} {losses.mean().item():.3f}")
    guessing = torch.log(torch.tensor(float(VOCAB))).item()
    print(f"per-token loss: {', '.join(per_stride)} (uniform guessing: {guessing:.3f})")


if __name__ == "__main__":
    main()
