"""A training script shaped like Accelerate's public "no trainer" examples, with sbdata's named glue: the import and
one ``wrap(...)`` line after ``prepare``; nothing else differs from the public script's shape.

Like those scripts it sizes ``max_train_steps`` and the LR schedule from ``len(train_dataloader)``, checkpoints
every ``--checkpointing_steps`` optimizer steps with ``accelerator.save_state(f"step_{n}")``, and on
``--resume_from_checkpoint .../step_{n}`` calls ``load_state``, derives the epoch and the step within it from ``n``
and ``len(train_dataloader)``, and skips with ``accelerator.skip_first_batches(train_dataloader, resume_step)``.
Each rank writes ``{--tag}_rank{r}.json`` to ``--out``: per optimizer step its number, epoch and the sorted sample
ids trained on, the learning rates, the final weights and the sbdata warnings seen.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sbdata.integrations.accelerate import wrap  # glue 1 of 2
from tests.launch import arm_watchdog

N = 64


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--per_device_train_batch_size", type=int, default=8)
    parser.add_argument("--num_train_epochs", type=int, default=3)
    parser.add_argument("--max_train_steps", type=int, default=None)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
    parser.add_argument("--checkpointing_steps", type=str, default=None)
    parser.add_argument("--resume_from_checkpoint", type=str, default=None)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    arm_watchdog()
    args = parse_args()
    out = Path(args.out)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.gradient_accumulation_steps)
    if args.seed is not None:
        set_seed(args.seed)
    x = torch.randn(N, 4, generator=torch.Generator().manual_seed(1))
    train_dataset = TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long(), torch.arange(N))
    train_dataloader = DataLoader(train_dataset, shuffle=True, batch_size=args.per_device_train_batch_size)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    overrode_max_train_steps = False
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    if args.max_train_steps is None:
        args.max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
        overrode_max_train_steps = True
    total = args.max_train_steps * accelerator.num_processes if overrode_max_train_steps else args.max_train_steps
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / total))

    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, lr_scheduler
    )
    train_dataloader = wrap(accelerator, train_dataloader, model, F.cross_entropy, keep=0.5)  # glue 2 of 2

    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    if overrode_max_train_steps:
        args.max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
    args.num_train_epochs = math.ceil(args.max_train_steps / num_update_steps_per_epoch)
    checkpointing_steps = args.checkpointing_steps
    if checkpointing_steps is not None and checkpointing_steps.isdigit():
        checkpointing_steps = int(checkpointing_steps)

    completed_steps = 0
    starting_epoch = 0
    resume_step = None
    log: list[list] = []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        if args.resume_from_checkpoint:
            checkpoint_path = args.resume_from_checkpoint
            path = os.path.basename(args.resume_from_checkpoint)
            accelerator.print(f"Resumed from checkpoint: {checkpoint_path}")
            accelerator.load_state(checkpoint_path)
            training_difference = os.path.splitext(path)[0]
            if "epoch" in training_difference:
                starting_epoch = int(training_difference.replace("epoch_", "")) + 1
                completed_steps = starting_epoch * num_update_steps_per_epoch
            else:
                resume_step = int(training_difference.replace("step_", "")) * args.gradient_accumulation_steps
                starting_epoch = resume_step // len(train_dataloader)
                completed_steps = resume_step // args.gradient_accumulation_steps
                resume_step -= starting_epoch * len(train_dataloader)

        for epoch in range(starting_epoch, args.num_train_epochs):
            model.train()
            if args.resume_from_checkpoint and epoch == starting_epoch and resume_step is not None:
                active_dataloader = accelerator.skip_first_batches(train_dataloader, resume_step)
            else:
                active_dataloader = train_dataloader
            for _step, (inputs, targets, ids) in enumerate(active_dataloader):
                with accelerator.accumulate(model):
                    loss = F.cross_entropy(model(inputs), targets)
                    accelerator.backward(loss)
                    optimizer.step()
                    lr_scheduler.step()
                    optimizer.zero_grad()
                if accelerator.sync_gradients:
                    completed_steps += 1
                    log.append([completed_steps, epoch, sorted(ids.tolist()), lr_scheduler.get_last_lr()[0]])
                if isinstance(checkpointing_steps, int):  # noqa: SIM102 - as the public scripts write it
                    if completed_steps % checkpointing_steps == 0 and accelerator.sync_gradients:
                        accelerator.save_state(str(out / f"step_{completed_steps}"))
                if completed_steps >= args.max_train_steps:
                    break

    weights = [p.detach().flatten().tolist() for p in accelerator.unwrap_model(model).parameters()]
    report = {
        "steps": log,
        "len": len(train_dataloader),
        "dataset_len": len(train_dataloader.dataset),
        "max_train_steps": args.max_train_steps,
        "weights": weights,
        "warnings": [f"{w.filename}:{w.lineno}: {w.message}" for w in record if "sbdata" in str(w.message)],
    }
    (out / f"{args.tag}_rank{accelerator.process_index}.json").write_text(json.dumps(report))
    accelerator.wait_for_everyone()
    accelerator.end_training()
    del accelerator, model, optimizer, train_dataloader, active_dataloader  # free the DDP model before the group
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
